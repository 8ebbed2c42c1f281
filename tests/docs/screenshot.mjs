// screenshot.mjs: the README's dashboard picture. Starts ATTND_BIN on a free
// loopback port, runs the page's default request in Debian's headless
// chromium (playwright-core from tests/browser) and saves the maps' part of
// the page to OUT (default docs/img/dashboard.png).
//
//   make screenshot

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../browser/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const ATTND = process.env.ATTND_BIN || 'build/attnd';
const OUT = process.env.OUT || 'docs/img/dashboard.png';
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';

const port = await new Promise((resolve, reject) => {
  const s = net.createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
});
const child = spawn(ATTND, ['--port', String(port), '--host', '127.0.0.1', '--quiet'],
  { stdio: ['ignore', 'inherit', 'inherit'] });
const base = `http://127.0.0.1:${port}`;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnd-shot-'));
let context = null;
try {
  for (let i = 0; ; i++) {
    try { if ((await fetch(`${base}/healthz`)).ok) break; } catch { /* not yet */ }
    if (i > 200) throw new Error('attnd did not answer /healthz');
    await new Promise((r) => setTimeout(r, 50));
  }
  context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run'],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] ?? await context.newPage();
  await page.goto(`${base}/`);
  await page.click('#run');
  await page.waitForFunction(() => /^HTTP 200/.test(document.getElementById('status').textContent));
  await page.waitForTimeout(300);
  await page.mouse.move(5, 5);
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  // From the status line down: the colour scale and the heads' maps.
  const top = await page.evaluate(() =>
    document.getElementById('status').getBoundingClientRect().top + window.scrollY - 8);
  await page.screenshot({ path: OUT, fullPage: true, clip: { x: 0, y: top, width: 1280, height: 820 } });
  console.log(`wrote ${OUT}`);
} finally {
  if (context) await context.close();
  child.kill('SIGTERM');
  fs.rmSync(dir, { recursive: true, force: true });
}
