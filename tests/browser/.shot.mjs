import { start_server, launch, close, run_page, set_form } from './lib.mjs';
import { make_stub, route_stub } from './stub.mjs';
const server = await start_server('/work/main/build/web/attnd');
const ctx = await launch(Number(process.env.DPR || 1));
const page = ctx.context.pages()[0];
page.on('console', m => console.log('console', m.text()));
page.on('pageerror', e => console.log('pageerror', e.message));
await route_stub(page, make_stub());
await page.goto(server.base + '/');
await set_form(page, JSON.parse(process.env.FORM || '{}'));
await run_page(page, true);
if (process.env.DO) await page.evaluate(process.env.DO);
await page.waitForTimeout(200);
for (const [i, sel] of (process.env.SELS || '').split(',').filter(Boolean).entries())
  await page.locator(sel).first().screenshot({ path: `/tmp/smoke/s${i}.png` });
await close(ctx); server.kill();
