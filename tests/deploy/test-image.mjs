// test-image.mjs: runs the image that build-image.mjs built from the
// Dockerfile (no Docker engine: a chroot into its root filesystem, mounted
// read-only, as its user, with exactly its environment), in the private
// network namespace mk/deploy.mk makes, and checks it as `docker run
// --read-only` and its HEALTHCHECK would see it.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";

import { ROOT } from "./lib/common.mjs";
import { cpuQuotaCgroup, inImage } from "./lib/image.mjs";
import { IN_NETNS, startProcess, runSync, request, until, SMALL_ATTEND, smallAttendProblem } from "./lib/attnd.mjs";

const IMAGE_DIR = path.resolve(process.env.IMAGE_DIR ?? path.join(ROOT, "build/image"));
const image = JSON.parse(readFileSync(path.join(IMAGE_DIR, "image.json"), "utf8"));

assert.ok(IN_NETNS, "run by `make test-image`, in a private network namespace (the image listens on its own port)");

test("image: the runtime stage holds the binary and no build tools", () => {
  const r = (p) => path.join(image.rootfs, p);
  assert.ok(existsSync(r(image.entrypoint[0])), image.entrypoint[0]);
  for (const tool of ["usr/bin/gcc", "usr/bin/make", "usr/bin/cc", "usr/include/cblas.h", "usr/include/jansson.h"]) {
    assert.equal(existsSync(r(tool)), false, `${tool} is in the runtime image`);
  }
  // No asset files: the dashboard is embedded in the binary.
  assert.equal(existsSync(r("src")), false);
});

test("image: runs read-only as its user, HEALTHCHECK passes, serves, drains on its STOPSIGNAL and exits 0", async (t) => {
  const port = Number(image.expose[0]);
  const proc = startProcess(inImage(image, [...image.entrypoint, ...(image.cmd ?? [])]), process.env);
  t.after(() => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill("SIGKILL");
  });
  const hc = inImage(image, image.healthcheck);
  const healthy = await until(() => runSync(hc, process.env, 5000).status === 0, 20000, 100);
  assert.ok(healthy, `HEALTHCHECK never passed:\n${proc.log()}`);

  // The process is the image's user, not root.
  const status = readFileSync(`/proc/${proc.child.pid}/status`, "utf8");
  const [uid, gid] = image.user.split(":");
  assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s`, "m"));
  assert.match(status, new RegExp(`^Gid:\\s+${gid}\\s`, "m"));

  for (const p of ["/healthz", "/livez", "/readyz"]) assert.equal((await request(port, "GET", p)).status, 200, p);
  const res = await request(port, "POST", "/attend", { body: SMALL_ATTEND, headers: { "Content-Type": "application/json" } });
  assert.equal(smallAttendProblem(res), null);
  const page = await request(port, "GET", "/");
  assert.equal(page.status, 200);
  assert.match(page.headers["content-type"], /^text\/html/);
  const api = await request(port, "GET", "/openapi.json");
  assert.equal(api.status, 200);
  assert.match(JSON.parse(api.body).openapi, /^3\./);
  assert.equal((await request(port, "GET", "/metrics")).status, 200);

  proc.child.kill(image.stopsignal);
  const done = await Promise.race([proc.exited, new Promise((r) => setTimeout(r, 30000, null).unref())]);
  assert.ok(done, `no exit within 30 s of ${image.stopsignal}:\n${proc.log()}`);
  assert.deepEqual(done, { code: 0, signal: null }, proc.log());
  assert.equal(runSync(hc, process.env, 5000).status, 1, "HEALTHCHECK must fail once the server stopped");
});

test("image: under a 1-CPU quota (docker run --cpus 1) the compute pool has 1 thread", async (t) => {
  const cg = cpuQuotaCgroup(1);
  if (!cg) {
    t.skip("no writable cgroup cpu controller here");
    return;
  }
  t.after(() => cg.remove());
  t.diagnostic(`cgroup v${cg.version}: ${cg.dir}`);
  const port = Number(image.expose[0]);
  const proc = startProcess(inImage(image, [...image.entrypoint, ...(image.cmd ?? [])], cg), process.env);
  t.after(() => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill("SIGKILL");
  });
  const up = await until(async () => (await request(port, "GET", "/metrics")).status === 200, 20000, 100);
  assert.ok(up, proc.log());
  const metrics = (await request(port, "GET", "/metrics")).body;
  assert.match(metrics, /^attnd_compute_threads 1$/m, `${metrics}\n${proc.log()}`);
  assert.match(proc.log(), /"compute_threads":1\b/);
  proc.child.kill(image.stopsignal);
  assert.deepEqual(await proc.exited, { code: 0, signal: null }, proc.log());
});
