// dashboard.test.mjs: drives the dashboard served by a real attnd in
// Debian's headless chromium (playwright-core, no downloaded browser) and
// checks what a user of the page relies on.
//
// v1 section (needs only a v1 service):
//   - one non-blank canvas per head; tooltips show the weight the service
//     returned for that cell (same request fetched from node, 4 decimals)
//     for per-head maps, the mean map, the enlarged map, keyboard reading,
//     and a pasted batched cross-attention request in base64; top_k rows;
//   - the colour scale chosen automatically (per row when causal, square
//     root from 48 keys) and overridden by the control;
//   - masked keys drawn grey, apart from small weights;
//   - a head is labelled focused only with confidence >= 0.5;
//   - 16 heads get 16 distinct colours; the token view draws the strongest
//     links of a query, and of a key when a key is hovered; long inputs
//     scroll; one head: "1 map" and no similarity matrix;
//   - the generator's RoPE, ALiBi, window and softcap controls put the v2
//     fields in the request;
//   - errors (service error code and pointer, invalid JSON, network, form)
//     and exports; a service with small limits (--max-body-bytes,
//     --max-map-elems, --max-dim, --max-heads): the page reads them from
//     GET /limits and refuses a request over one before sending it; from
//     a service without /limits, its 413s said as what to change, and
//     their limits used by the form from then on;
//   - at device scale factor 2, canvases have twice their CSS size in
//     backing pixels.
// v2 section (e2e_v2.mjs; needs the service's v2 features): window and
// RoPE change the weights, refs on the second run, a first run at d_model
// 1280 without a long task on the page's main thread, the inline retry
// when the store forgot them, the model view of 3
// layers, rollout, the neuron view against q and k, norm-based maps, an
// uploaded layers file.
// Always: no console errors, no page errors, every request to the page's
// own origin.
// Environment: ATTND_BIN (required) the server binary; SCREENSHOT (optional)
// where to save a full-page screenshot.

import fs from 'node:fs';
import { checker, start_server, launch, close, watch, post, tooltip_weight, hover_cell,
  plot_variety, run_page, cell_rgb, is_masked_grey, lab, rgb_hex, hover_lines_key, hover_column, set_form } from './lib.mjs';
import { v2_checks } from './e2e_v2.mjs';

const SCREENSHOT = process.env.SCREENSHOT || '';
const c = checker();
const check = c.check;
const HEAD = (h) => `#head-maps canvas[data-head="${h}"]`;

async function v1_checks(page, base, flags) {
  const canvases = page.locator('#head-maps canvas[data-head]');
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
  check(await canvases.count() === heads, `one canvas per head (${heads})`, `found ${await canvases.count()}`);
  for (let i = 0; i < heads; i++) {
    const v = await plot_variety(page, HEAD(i));
    check(v > 0.05, `head ${i}'s map is not one colour`, `${(v * 100).toFixed(1)}% of pixels differ`);
  }
  check(await page.getAttribute('#legend', 'data-scale') === 'max',
    'automatic scale for 10 keys and no mask: 0 to each map\'s maximum', await page.getAttribute('#legend', 'data-scale'));

  const tokens = req.tokens;
  const it = tokens.indexOf('it');
  const animal = tokens.indexOf('animal');
  for (const [h, q, k] of [[1, it, animal], [0, 0, 0], [heads - 1, tokens.length - 1, 2]]) {
    const tip = await hover_cell(page, HEAD(h), q, k);
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

  // Per-head figures beside each map, and the similarity matrix.
  const an = ref.json.analysis;
  check(req.analysis === true && Array.isArray(an?.heads) && an.heads.length === heads,
    'the page asks for analysis and the service returns one entry per head');
  if (Array.isArray(an?.heads)) {
    const figures = page.locator('dd[data-figure="entropy"]');
    check(await figures.count() === heads, 'an entropy figure beside every head', `found ${await figures.count()}`);
    for (const [h, key] of [[0, 'entropy'], [heads - 1, 'confidence']]) {
      const want = Number(an.heads[h][key]).toFixed(3);
      const shown = await page.locator(`dd[data-figure="${key}"]`).nth(h).textContent();
      check(shown === want, `head ${h}'s ${key} shows ${want}`, shown);
    }
    for (let h = 0; h < heads; h++) {
      const s = an.heads[h];
      const want = s.pattern === 'focused' && s.confidence < 0.5 ? 'mixed' : s.pattern;
      const dd = page.locator('dd[data-figure="pattern"]').nth(h);
      check(await dd.textContent() === want && await dd.getAttribute('data-service-pattern') === s.pattern,
        `head ${h}: the service's ${s.pattern} (confidence ${s.confidence.toFixed(3)}) is shown as ${want}`,
        await dd.textContent());
    }
    check(await page.isVisible('#similarity-section'), 'the head-similarity matrix is shown');
    const sim_tip = await hover_cell(page, '#similarity-card canvas', 0, heads - 1);
    const sim_want = Number(an.similarity[0][heads - 1]).toFixed(4);
    check(tooltip_weight(sim_tip) === sim_want, `similarity tooltip (0, ${heads - 1}) shows ${sim_want}`, sim_tip);
  }

  // Clicking a head opens the enlarged view; Escape closes it.
  await page.locator(HEAD(0)).click();
  check(await page.locator('#zoom[open] canvas[data-view="zoom"]').count() === 1, 'clicking a head opens the enlarged map');
  const zoom_tip = await hover_cell(page, '#zoom[open] canvas[data-view="zoom"]', it, animal);
  check(tooltip_weight(zoom_tip) === att[0][it][animal].toFixed(4) && await page.isVisible('#tooltip'),
    `the enlarged map's tooltip shows ${att[0][it][animal].toFixed(4)}`, zoom_tip);
  await page.keyboard.press('Escape');
  check(await page.locator('#zoom[open]').count() === 0, 'Escape closes the enlarged map');

  // Keyboard: a focused map reads cells with the arrow keys.
  await page.locator(HEAD(0)).focus();
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  const key_tip = (await page.textContent('#tooltip')) ?? '';
  check(tooltip_weight(key_tip) === att[0][1][1].toFixed(4),
    'arrow keys move to cell (1, 1) of head 0 and show its weight', key_tip);
  check((await page.textContent('#cell-live')) === key_tip,
    'the cell read with the keyboard is announced in the #cell-live region');

  // -- token view: strongest links from a query, and to a key --------------
  await hover_cell(page, HEAD(1), it, 0);
  const links = JSON.parse(await page.getAttribute('#lines', 'data-links'));
  check(await page.getAttribute('#lines', 'data-focus') === `query:${it}`,
    'hovering a map cell puts its query in the token view\'s focus');
  let links_ok = links.length > 0;
  for (let h = 0; h < heads; h++) {
    const mine = links.filter((l) => l[0] === h);
    const top = att[h][it].map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 6)
      .filter(([w]) => w >= 0.01).map(([, j]) => j);
    links_ok &&= mine.length <= 6 && mine.every((l) => l[1] === it && l[3] >= 0.01) &&
      JSON.stringify(mine.map((l) => l[2]).sort()) === JSON.stringify(top.sort());
  }
  check(links_ok, 'the token view draws, per head, the 6 strongest keys (weight >= 0.01) of the query',
    JSON.stringify(links));
  await hover_lines_key(page, animal);
  const back = JSON.parse(await page.getAttribute('#lines', 'data-links'));
  const col_top = att[0].map((row, i) => [row[animal], i]).sort((a, b) => b[0] - a[0]).slice(0, 6)
    .filter(([w]) => w >= 0.01).map(([, i]) => i);
  check(await page.getAttribute('#lines', 'data-focus') === `key:${animal}` && back.length > 0 &&
    back.every((l) => l[2] === animal) &&
    JSON.stringify(back.filter((l) => l[0] === 0).map((l) => l[1]).sort()) === JSON.stringify(col_top.sort()),
  'hovering a key in the token view draws the queries that attend to it most', JSON.stringify(back));
  // The links box is read as a whole number within its range.
  const per_head = async () => {
    const ls = JSON.parse(await page.getAttribute('#lines', 'data-links'));
    return Object.values(ls.reduce((c, l) => ({ ...c, [l[0]]: (c[l[0]] ?? 0) + 1 }), {}));
  };
  await page.fill('#links', '0');
  const at_zero = await per_head();
  await page.fill('#links', '2.5');
  const at_half = await per_head();
  await page.fill('#links', '6');
  check(at_zero.length > 0 && at_zero.every((c) => c === 1) && at_half.length > 0 &&
    at_half.every((c) => c <= 2) && at_half.some((c) => c === 2),
  'links per head 0 draws one link a head (the box\'s least) and 2.5 draws two; 0 drew six',
  JSON.stringify({ at_zero, at_half }));

  const col_tip = await hover_column(page, HEAD(2), animal);
  check(await page.getAttribute('#lines', 'data-focus') === `key:${animal}` && col_tip.includes('\u201canimal\u201d'),
    'hovering a key\'s label above a map puts that key in the token view\'s focus', col_tip);

  if (SCREENSHOT) {
    await page.mouse.move(5, 5);
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    console.log(`  screenshot: ${SCREENSHOT}`);
  }

  // -- causal mask and padding from the form -------------------------------
  await set_form(page, { mask: 'causal', padding: 2 });
  const masked_body = await run_page(page, true);
  const masked_req = JSON.parse(masked_body);
  const mn = masked_req.tokens.length;
  check(masked_req.mask === 'causal' && masked_req.key_padding_mask?.length === mn &&
    masked_req.key_padding_mask.filter(Boolean).length === 2 && masked_req.key_padding_mask[mn - 1] === true,
  'the generated request carries the causal mask and 2 trailing padded keys');
  check(await page.getAttribute('#legend', 'data-scale') === 'row', 'automatic scale for a causal map: per row',
    await page.getAttribute('#legend', 'data-scale'));
  const masked_ref = await post(base, masked_body);
  const ma = masked_ref.json.attention;
  for (const [h, q, k, why] of [[2, 3, 5, 'a future key'], [1, mn - 1, mn - 2, 'a padded key'],
    [1, 4, 2, 'a visible key']]) {
    const tip = await hover_cell(page, HEAD(h), q, k);
    const want = ma?.[h]?.[q]?.[k]?.toFixed(4);
    const masked = why !== 'a visible key';
    check(masked_ref.status === 200 && tooltip_weight(tip) === want && tip.includes('masked') === masked,
      `causal + padding: head ${h}, query ${q}, key ${k} (${why}) shows ${want}${masked ? ', masked' : ''}`, tip);
    const rgb = await cell_rgb(page, HEAD(h), q, k);
    check(is_masked_grey(rgb) === masked, `${why} is drawn ${masked ? '' : 'not '}grey`, JSON.stringify(rgb));
  }
  check(ma?.[2]?.[3]?.[5] === 0 && ma?.[1]?.[mn - 1]?.[mn - 2] === 0, 'the service gives masked keys weight 0');

  // -- exports -------------------------------------------------------------
  const png_dl = page.waitForEvent('download');
  await page.locator(`${HEAD(0)} ~ .map-actions button`, { hasText: 'PNG' }).click();
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
  'JSON export holds the last response (head 1, query 4, key 2 within 1e-6 of node\'s answer)', String(exported_w));

  // -- long inputs: the scale and the token view ------------------------------
  await set_form(page, { padding: 0, repeat: 6 });
  await run_page(page, true);
  check(await page.getAttribute('#legend', 'data-scale') === 'row+pow0.5',
    'automatic scale for 60 causal keys: per row and square root', await page.getAttribute('#legend', 'data-scale'));
  const wrap = await page.locator('#lines-wrap').evaluate((w) => [w.scrollHeight, w.clientHeight]);
  check(wrap[0] > wrap[1] + 100, 'the token view of 60 tokens scrolls', JSON.stringify(wrap));
  await set_form(page, { mask: 'none' });
  await run_page(page, true);
  check(await page.getAttribute('#legend', 'data-scale') === 'max+pow0.5',
    'automatic scale for 60 keys without a mask: square root of each map\'s maximum');
  await set_form(page, { 'scale-mode': 'log' });
  check(await page.getAttribute('#legend', 'data-scale') === 'max+log' &&
    await page.getAttribute(HEAD(0), 'data-scale') === 'max+log', 'the colour scale control overrides the automatic one');
  await set_form(page, { 'scale-mode': 'auto', repeat: 1 });

  // -- 16 heads: distinct colours -----------------------------------------------
  await set_form(page, { heads: 16, 'kv-heads': 4 });
  await run_page(page, true);
  const colours = await page.locator('#line-heads .swatch').evaluateAll(
    (els) => els.map((e) => getComputedStyle(e).backgroundColor));
  const hexes = colours.map(rgb_hex);
  let min_de = Infinity;
  for (let i = 0; i < hexes.length; i++) for (let j = i + 1; j < hexes.length; j++) {
    const [a, b] = [lab(hexes[i]), lab(hexes[j])];
    min_de = Math.min(min_de, Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]));
  }
  check(hexes.length === 16 && new Set(hexes).size === 16 && min_de >= 20,
    `16 heads get 16 distinct colours (closest pair Delta E ${min_de.toFixed(1)} >= 20)`, hexes.join(' '));
  check(await page.locator('#similarity-section').isVisible(), 'similarity for 16 heads');

  // -- one head ----------------------------------------------------------------
  await set_form(page, { heads: 1, 'kv-heads': 1 });
  await run_page(page, true);
  await page.waitForFunction(() => /Drew/.test(document.getElementById('status').textContent));
  const status = await page.textContent('#status');
  check(/Drew 1 map /.test(status) && !/1 maps/.test(status), 'one head: the status says "1 map"', status);
  check(!(await page.isVisible('#similarity-section')), 'one head: no head-similarity matrix');
  await set_form(page, { heads: 4, 'kv-heads': 4 });

  // -- the generator's model-family controls --------------------------------------
  await set_form(page, { rope: true, 'rope-theta': 500000, alibi: true, 'window-left': 3, softcap: 20 });
  const fam = JSON.parse(await run_page(page, true));
  check(fam.rope?.theta === 500000 && fam.alibi === true && fam.window?.left === 3 &&
    fam.window.right === undefined && fam.softcap === 20,
  'RoPE theta, ALiBi, the window and softcap controls put rope, alibi, window and softcap in the request',
  JSON.stringify({ rope: fam.rope, alibi: fam.alibi, window: fam.window, softcap: fam.softcap }));
  // A v2 service may hold them already: then they travel as refs.
  const same = (a, b) => Boolean(a?.ref) || JSON.stringify(a) === JSON.stringify(b);
  check(same(fam.x, req.x) && same(fam.w_q, req.w_q) && same(fam.w_k, req.w_k),
    'the same sentence and seed keep x and the weights, so maps compare');
  await set_form(page, { rope: false, alibi: false, 'window-left': '', softcap: '' });

  // -- a pasted batched cross-attention request, base64 both ways ----------
  const cross = {
    x: [[[1, 0], [0, 1], [1, 1]], [[2, 0], [0, 0.5], [-1, 1]]],
    memory: [[[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], [[0, 0, 1], [1, 0, 0], [0, 2, 0], [1, -1, 0]]],
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
  const cross_tip = await hover_cell(page, HEAD(1), 2, 3);
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
  await page.fill('#request-json', JSON.stringify({ ...cross, top_k: 2 }));
  const topk_body = await run_page(page, true);
  check(JSON.parse(topk_body).top_k === 2, 'a pasted top_k is sent');
  check(await canvases.count() === 2, 'top_k rows are drawn, one canvas per head', `found ${await canvases.count()}`);
  await page.selectOption('#batch', '1');
  const dense_row = cross_ref.json.attention?.[1]?.[1]?.[2] ?? [];
  const order = dense_row.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  const [top_w, top_j] = order[0] ?? [NaN, 0];
  const [, low_j] = order[order.length - 1] ?? [NaN, 0];
  const top_tip = await hover_cell(page, HEAD(1), 2, top_j);
  check(tooltip_weight(top_tip) === top_w?.toFixed(4),
    `top_k map: batch 1, head 1, query 2, key ${top_j} shows ${top_w?.toFixed(4)}`, top_tip);
  const low_tip = await hover_cell(page, HEAD(1), 2, low_j);
  check(tooltip_weight(low_tip) === null && /not among the top 2 of this row \(no weight returned\)/.test(low_tip),
    `top_k map: key ${low_j}, outside the top 2 of its row, says no weight was returned (not 0.0000)`, low_tip);
  const top_cap = await page.locator('#head-maps figure.map figcaption').first().textContent();
  check(/top 2 of each row, other keys not returned/.test(top_cap) && await page.getAttribute(HEAD(0), 'data-top-k') === '2' &&
    /top_k 2: keys outside a row's 2 largest have no weight in the answer/.test(await page.textContent('#legend-label')),
  'top_k maps say so in their captions and the legend', top_cap);

  // -- errors ---------------------------------------------------------------
  flags.http_errors = true;
  const ragged = { x: [[1, 0], [0]], w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [0, 1]], w_v: [[1, 0], [0, 1]] };
  await page.fill('#request-json', JSON.stringify(ragged));
  const bad_body = await run_page(page, false);
  const bad_ref = await post(base, bad_body);
  const bad_err = bad_ref.json?.error ?? {};
  check(bad_ref.status === 422 && bad_err.code === 'invalid_request',
    'a ragged x is refused with 422 invalid_request', `${bad_ref.status} ${bad_err.code}`);
  const err_text = (await page.textContent('#error')) ?? '';
  check(err_text.includes(bad_err.code) && err_text.includes(String(bad_ref.status)),
    `#error shows HTTP ${bad_ref.status} and the code ${bad_err.code}`, err_text);
  const shown_field = await page.locator('#error .pointer code').textContent().catch(() => null);
  check(Boolean(bad_err.field) && shown_field === bad_err.field,
    `#error shows the JSON pointer ${bad_err.field} as the error's field`, String(shown_field));
  check(err_text.includes(bad_err.message), '#error shows the service\'s message', err_text);
  // The request box selects the value the pointer names.
  const selected = () => page.evaluate(() => {
    const t = document.getElementById('request-json');
    return { text: t.value.slice(t.selectionStart, t.selectionEnd), start: t.selectionStart,
      focused: document.activeElement === t };
  });
  const pointed = bad_err.field?.split('/').slice(1).reduce((v, k) => v?.[k], ragged);
  const sel = await selected();
  check(sel.focused && pointed !== undefined && sel.text === JSON.stringify(pointed),
    `the request box selects what ${bad_err.field} points at (${JSON.stringify(pointed)})`, JSON.stringify(sel));
  // A message that starts with its pointer shows the pointer once.
  await page.fill('#request-json', JSON.stringify({ ...ragged, x: [[1, 0], [0, 1]], key_pading_mask: [false, true] }));
  await run_page(page, false);
  const typo = (await page.textContent('#error')) ?? '';
  check(typo.split('/key_pading_mask').length === 2 && /did you mean/.test(typo) &&
    await page.locator('#error .pointer code').textContent().catch(() => null) === '/key_pading_mask',
  'a misspelt field\'s pointer is shown once, as the pointer', typo);
  check(await canvases.count() === 0 && await page.isHidden('#results') && await page.isDisabled('#export-json'),
    'an error clears the previous maps and disables the download');

  await page.fill('#request-json', '{"x": [[1, 2],');
  const broken_body = await run_page(page, false);
  check(broken_body === '{"x": [[1, 2],', 'text that does not parse is sent unchanged');
  const broken_text = (await page.textContent('#error')) ?? '';
  check(broken_text.includes('invalid_json') && broken_text.includes('400'),
    '#error shows HTTP 400 invalid_json for a body that is not JSON', broken_text);
  // ... and the box selects the byte the message names, counted in UTF-8.
  await page.fill('#request-json', '{"tokens": ["\u00e9t\u00e9", "b"],\n "x": [[1, 2], [3, 4,]]}');
  await run_page(page, false);
  const at_byte = await selected();
  check(at_byte.focused && at_byte.text === ']' && /line 2/.test((await page.textContent('#error')) ?? ''),
    'for invalid_json the request box selects the character at the byte the message names', JSON.stringify(at_byte));
  flags.http_errors = false;

  // A network failure (the request aborted before any answer) is shown too.
  await page.fill('#request-json', JSON.stringify(cross));
  await page.route('**/attend', (route) => route.abort('connectionreset'));
  flags.aborting = true;
  await page.click('#run');
  await page.waitForSelector('#error:not([hidden])');
  const net_text = (await page.textContent('#error')) ?? '';
  check(net_text.includes('network_error'), '#error shows a network failure as network_error', net_text);
  await page.unroute('**/attend');
  flags.aborting = false;

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
  await page.fill('#kv-heads', '4');

  // A service with small limits publishes them (GET /limits): the form
  // refuses a request over one before sending anything, naming this
  // server's limit. From a service without /limits (an older attnd,
  // played by a 404) the page assumes the defaults; the service's 413s
  // are then said as what to change, and their limits used from then on.
  const tight = await start_server(process.env.ATTND_BIN, ['--max-body-bytes', '60000', '--max-map-elems', '300']);
  const p2 = await page.context().newPage();
  try {
    const w2 = watch(p2, tight.base, (t) => /status of (413|404)/.test(t));
    let posts = 0;
    p2.on('request', (r) => { if (r.url().endsWith('/attend')) posts++; });
    const limits_from = (p) => p.waitForSelector('body[data-limits]', { timeout: 5000 })
      .then(() => p.getAttribute('body', 'data-limits'), () => 'never');
    const refused_here = async (p) => {
      const before = posts;
      await p.click('#run');
      await p.waitForSelector('#error:not([hidden])');
      return { sent: posts - before, code: await p.getAttribute('#error', 'data-code'), text: await p.textContent('#error') };
    };
    await p2.goto(`${tight.base}/`);
    const from = await limits_from(p2);
    check(from === 'server', 'the page takes this server\'s limits from GET /limits', from);
    const told = await p2.textContent('#size-hint');
    check(/makes a request of about 1\d\d(\.\d)? KiB; the server takes at most 58\.6 KiB \(this server's --max-body-bytes\)/.test(told) &&
      await p2.getAttribute('#size-hint', 'data-over') === 'true',
    'before anything is sent, the form says the request is over this server\'s --max-body-bytes (58.6 KiB)', told);
    const body_up_front = await refused_here(p2);
    check(body_up_front.sent === 0 && body_up_front.code === 'too_large' &&
      /at most 58\.6 KiB \(this server's --max-body-bytes\)/.test(body_up_front.text),
    'and Run refuses it on the page, naming this server\'s limit, nothing sent', JSON.stringify(body_up_front));
    await set_form(p2, { 'd-model': 16 });
    const maps_told = await p2.textContent('#size-hint');
    check(/make 400 attention-map values; the server returns at most 300 \(this server's --max-map-elems\)/.test(maps_told) &&
      await p2.getAttribute('#size-hint', 'data-over') === 'true', 'd_model 16: the maps are over this server\'s --max-map-elems (300)',
    maps_told);
    const maps_up_front = await refused_here(p2);
    check(maps_up_front.sent === 0 && maps_up_front.code === 'too_large',
      'and are refused on the page, nothing sent', JSON.stringify(maps_up_front));

    await p2.route('**/limits', (route) => route.fulfill({ status: 404, contentType: 'application/json',
      body: '{"error":{"code":"not_found","message":"no such path: /limits"}}' }));
    await p2.goto(`${tight.base}/`);
    const old_from = await limits_from(p2);
    await set_form(p2, { 'd-model': 64 });
    const assumed = await p2.textContent('#size-hint');
    check(old_from === 'default' && /at most 64 MiB, the default --max-body-bytes/.test(assumed),
      'without /limits the page assumes the default limits and says so', `${old_from}: ${assumed}`);
    await run_page(p2, false);
    const advice = await p2.textContent('#error .advice').catch(() => '');
    check(await p2.getAttribute('#error', 'data-code') === 'too_large' &&
      /^The request is 1\d\d\.\d KiB; this server takes at most 58\.6 KiB: use a smaller d_model, fewer tokens or layers/.test(advice),
    'the service\'s 413 for --max-body-bytes is said as the request\'s size, the server\'s limit and what to change', advice);
    const learned = await p2.textContent('#size-hint');
    check(/at most 58\.6 KiB \(this server's --max-body-bytes\)/.test(learned) &&
      await p2.getAttribute('#size-hint', 'data-over') === 'true', 'the form then uses this server\'s body limit', learned);
    await set_form(p2, { 'd-model': 16 });
    await run_page(p2, false);
    const maps = await p2.textContent('#error .advice').catch(() => '');
    check(/more values than this server returns \(300\): use fewer tokens, heads or layers/.test(maps),
      'the service\'s 413 for --max-map-elems says to use fewer tokens, heads or layers', maps);
    check(/make 400 attention-map values; the server returns at most 300 \(this server's --max-map-elems\)/.test(await p2.textContent('#size-hint')) &&
      await p2.getAttribute('#size-hint', 'data-over') === 'true', 'the form then uses this server\'s map limit',
    await p2.textContent('#size-hint'));
    check(w2.console.length + w2.errors.length + w2.foreign.length === 0, 'no errors on that page',
      [...w2.console, ...w2.errors, ...w2.foreign].join(' | '));
  } finally {
    await p2.close();
    tight.kill();
  }

  // A service with a small --max-dim and --max-heads: the form refuses
  // tokens, d_model and heads over them up front, and a request within
  // them is computed.
  const narrow = await start_server(process.env.ATTND_BIN, ['--max-dim', '8', '--max-heads', '2']);
  const p3 = await page.context().newPage();
  try {
    const w3 = watch(p3, narrow.base);
    let posts = 0;
    p3.on('request', (r) => { if (r.url().endsWith('/attend')) posts++; });
    await p3.goto(`${narrow.base}/`);
    const from = await p3.waitForSelector('body[data-limits]', { timeout: 5000 })
      .then(() => p3.getAttribute('body', 'data-limits'), () => 'never');
    const hint = () => p3.textContent('#size-hint');
    const tokens = await hint();
    check(from === 'server' && /^10 tokens; the server takes at most 8 \(this server's --max-dim\)/.test(tokens),
      '--max-dim 8: 10 tokens are over this server\'s --max-dim', `${from}: ${tokens}`);
    await p3.click('#run');
    await p3.waitForSelector('#error:not([hidden])');
    const err = await p3.textContent('#error');
    check(posts === 0 && await p3.getAttribute('#error', 'data-code') === 'too_large' &&
      /at most 8 \(this server's --max-dim\)/.test(err), 'and Run refuses them on the page, naming the limit, nothing sent', err);
    await set_form(p3, { sentence: 'a b c' });
    const width = await hint();
    check(/^d_model 64; the server takes at most 8 \(this server's --max-dim\): use a smaller d_model/.test(width),
      '3 tokens of d_model 64: d_model is over it', width);
    await set_form(p3, { 'd-model': 8 });
    const heads = await hint();
    check(/^4 heads; the server takes at most 2 \(this server's --max-heads\): use fewer heads/.test(heads),
      'd_model 8 in 4 heads: the heads are over --max-heads 2', heads);
    await set_form(p3, { 'kv-heads': 2, heads: 2 });
    check(await p3.getAttribute('#size-hint', 'data-over') === 'false', '2 heads: within every limit');
    await run_page(p3, true);
    check(posts === 1 && /^HTTP 200/.test(await p3.textContent('#status')),
      'and the request the form lets through is computed by that server', await p3.textContent('#status'));
    check(w3.console.length + w3.errors.length + w3.foreign.length === 0, 'no errors on that page',
      [...w3.console, ...w3.errors, ...w3.foreign].join(' | '));
  } finally {
    await p3.close();
    narrow.kill();
  }

  const aria = await page.evaluate(() => ['status', 'error'].map(
    (id) => document.getElementById(id).getAttribute('aria-live')));
  check(aria[0] === 'polite' && aria[1] === 'assertive', '#status and #error are aria-live regions');
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea')]
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
    .map((el) => el.id || el.name));
  check(unlabelled.length === 0, 'every form control has a label', unlabelled.join(', '));
}

// Device scale factor 2: every canvas's backing store is twice its CSS size.
async function hidpi_checks(base) {
  const ctx = await launch(2);
  try {
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    const w = watch(page, new URL(base).origin);
    await page.goto(`${base}/`);
    await run_page(page, true);
    for (const sel of [HEAD(0), '#mean-card canvas', '#legend', '#lines']) {
      const [bw, bh, cw, ch] = await page.locator(sel).evaluate((el) => {
        // clientWidth: the CSS size inside any border.
        return [el.width, el.height, el.clientWidth, el.clientHeight];
      });
      check(Math.abs(bw - 2 * cw) <= 1 && Math.abs(bh - 2 * ch) <= 1,
        `device scale factor 2: ${sel} has a ${bw} x ${bh} backing store for ${cw} x ${ch} CSS pixels`);
    }
    const tip = await hover_cell(page, HEAD(1), 7, 1); // "it" -> "animal"
    check(tooltip_weight(tip) !== null && tip.includes('\u201cit\u201d'), 'device scale factor 2: tooltips find their cell', tip);
    check(w.console.length === 0 && w.errors.length === 0 && w.foreign.length === 0,
      'device scale factor 2: no console or page errors, no other origin',
      [...w.console, ...w.errors, ...w.foreign].join(' | '));
  } finally {
    await close(ctx);
  }
}

async function main() {
  const server = await start_server(process.env.ATTND_BIN);
  const { base } = server;
  const origin = new URL(base).origin;
  let ctx = null;
  const flags = { http_errors: false, aborting: false };
  try {
    ctx = await launch(1);
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    // Chromium logs every non-2xx fetch as "Failed to load resource"; the
    // error steps provoke exactly those on purpose.
    const w = watch(page, origin, (text) =>
      (flags.http_errors && /Failed to load resource: the server responded with a status of 4\d\d/.test(text)) ||
      (flags.aborting && /Failed to load resource: net::ERR_CONNECTION_RESET/.test(text)));
    const failed = [];
    page.on('requestfailed', (r) => {
      if (!(flags.aborting && r.url().endsWith('/attend'))) failed.push(`${r.url()} ${r.failure()?.errorText}`);
    });
    console.log(`dashboard at ${base}/`);
    const home = await page.goto(`${base}/`);
    check(home.status() === 200, 'GET / answers 200', `status ${home.status()}`);
    check((home.headers()['content-type'] ?? '').startsWith('text/html'), 'GET / is text/html',
      home.headers()['content-type']);

    c.group = 'v1';
    console.log('v1: the dashboard against any service');
    await v1_checks(page, base, flags);
    await hidpi_checks(base);

    c.group = 'v2';
    console.log('v2: needs the service\'s v2 features (layers, rollout, return_qk, value_norms, store, window, rope)');
    flags.http_errors = true; // a v1 service refuses some v2 requests; the checks say which
    await v2_checks(page, base, c);
    flags.http_errors = false;

    c.group = 'hygiene';
    check(w.console.length === 0, 'no console errors', w.console.join(' | '));
    check(w.errors.length === 0, 'no uncaught page errors', w.errors.join(' | '));
    check(w.foreign.length === 0, `every request went to ${origin}`, w.foreign.join(', '));
    check(failed.length === 0, 'no failed requests', failed.join(', '));
  } finally {
    await close(ctx);
    server.kill();
  }
}

main().then(() => {
  const by = [...c.failed].map(([g, k]) => `${g}: ${k} failed`).join(', ');
  console.log(`${c.checks - c.failures}/${c.checks} browser checks passed${by ? ` (${by})` : ''}`);
  process.exit(c.failures ? 1 : 0);
}, (e) => {
  console.error(`browser test aborted: ${e.stack || e}`);
  console.log(`${c.checks - c.failures}/${c.checks} browser checks passed before the abort`);
  process.exit(1);
});
