// test-runtime.mjs: checks that need build/attnd. The Dockerfile's runtime
// packages against what the binary links; the documented variables against
// `attnd --help`; and the binary started exactly as `docker run`, the kubelet
// and `docker compose` would start it (argv from ENTRYPOINT/CMD, environment
// from ENV, the Deployment and the compose file, the image's user), probed as
// HEALTHCHECK and the kubelet probe it, scraped as Prometheus would and
// validated with promtool, then stopped with SIGTERM.
//
// mk/deploy.mk runs this file in a private network namespace, so the daemon
// listens on the image's own port; elsewhere PORT is replaced by a free port
// and the test says so.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, realpathSync, existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import net from "node:net";
import path from "node:path";

import {
  ROOT, DOCS, k8sObjects, findKind, dockerfile, compose, attndContainer, resolvePort,
} from "./lib/common.mjs";
import {
  ATTND_BIN, IN_NETNS, CONTAINER_PATH, hostPath, imageBinary, startProcess, runSync, request, parseResponse,
  until, freePort, refused, SMALL_ATTEND, smallAttendProblem,
} from "./lib/attnd.mjs";

const PROMTOOL = process.env.PROMTOOL;
const IS_ROOT = process.getuid?.() === 0;

assert.ok(ATTND_BIN && existsSync(ATTND_BIN), `ATTND_BIN=${ATTND_BIN}: build/attnd is needed (make all)`);

// -- runtime packages ---------------------------------------------------------

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return { status: r.status, out: r.stdout ?? "", err: r.stderr ?? "" };
}

// The Debian package owning each path, asking dpkg once: each path is tried
// as ldd printed it and in its resolved form (alternatives symlinks, /lib vs
// /usr/lib on a merged-/usr system).
function packagesOf(files) {
  const candidates = new Map();
  for (const f of files) {
    const real = realpathSync(f);
    candidates.set(f, [...new Set([f, real, real.replace(/^\/usr\//, "/"), `/usr${real}`])]);
  }
  const all = [...new Set([...candidates.values()].flat())];
  const owners = new Map();
  for (const line of sh("dpkg", ["-S", ...all]).out.split("\n")) {
    const m = /^([^:\s,]+)(?::[\w-]+)?(?:, [^:]+)*: (\/.*)$/.exec(line);
    if (m && !line.startsWith("diversion")) owners.set(m[2], m[1]);
  }
  return Object.fromEntries(files.map((f) => [f, candidates.get(f).map((c) => owners.get(c)).find(Boolean) ?? null]));
}

// Every installed package: its dependencies (Depends and Pre-Depends, each an
// array of alternatives), whether it is Essential, and what it Provides.
function installedPackages() {
  const r = sh("dpkg-query", ["-W", "-f=${Package}\t${Status}\t${Essential}\t${Depends}, ${Pre-Depends}\t${Provides}\n"]);
  const pkgs = new Map();
  const names = (s) => s.split("|").map((c) => c.trim().split(/[\s(]/)[0].replace(/:any$/, "")).filter(Boolean);
  for (const line of r.out.split("\n")) {
    const [name, status, essential, deps, provides] = line.split("\t");
    if (!status?.includes("install ok installed")) continue;
    pkgs.set(name, {
      essential: essential === "yes",
      deps: (deps ?? "").split(",").map(names).filter((a) => a.length),
      provides: (provides ?? "").split(",").flatMap(names),
    });
  }
  return pkgs;
}

// Installed packages that roots need, roots included (recursively; of an
// "a | b" choice or a virtual package, the ones installed here).
function dependencyClosure(pkgs, roots) {
  const providers = new Map();
  for (const [name, p] of pkgs) {
    for (const v of p.provides) providers.set(v, [...(providers.get(v) ?? []), name]);
  }
  const seen = new Set();
  const todo = [...roots];
  while (todo.length) {
    const n = todo.pop();
    if (seen.has(n)) continue;
    if (!pkgs.has(n)) {
      todo.push(...(providers.get(n) ?? []));
      continue;
    }
    seen.add(n);
    for (const alt of pkgs.get(n).deps) todo.push(...alt);
  }
  return seen;
}

test("ldd: the Dockerfile installs exactly the packages of the libraries attnd links", (t) => {
  const ldd = sh("ldd", [ATTND_BIN]);
  assert.equal(ldd.status, 0, ldd.err);
  assert.ok(!/not found/.test(ldd.out), ldd.out);
  const libs = [];
  for (const line of ldd.out.split("\n")) {
    const m = /=>\s*(\/\S+)/.exec(line) || /^\s*(\/\S+)\s+\(/.exec(line);
    if (m) libs.push(m[1]);
  }
  assert.ok(libs.length >= 4, ldd.out);
  const owner = packagesOf(libs);
  const unowned = libs.filter((l) => !owner[l]);
  assert.deepEqual(unowned, [], "libraries that no Debian package owns");

  // debian:bookworm-slim holds the essential packages and what they need.
  const pkgs = installedPackages();
  const essential = [...pkgs].filter(([, p]) => p.essential).map(([name]) => name);
  const base = dependencyClosure(pkgs, essential);
  const df = dockerfile();
  const provided = dependencyClosure(pkgs, df.packages);
  t.diagnostic(libs.map((l) => `${l}: ${owner[l]}`).join(", "));
  const missing = libs.filter((l) => !provided.has(owner[l]) && !base.has(owner[l]))
    .map((l) => `${l} (${owner[l]})`);
  assert.deepEqual(missing, [], "linked libraries whose package the runtime stage does not install");
  // Every named package owns a library the binary links: nothing is
  // installed for nothing.
  const needed = new Set(libs.map((l) => owner[l]));
  const unneeded = df.packages.filter((p) => !needed.has(p));
  assert.deepEqual(unneeded, [], "runtime packages that provide no linked library");
});

// -- options and documentation ------------------------------------------------

function helpText() {
  const r = sh(ATTND_BIN, ["--help"]);
  assert.equal(r.status, 0, r.err);
  return r.out;
}

test("options: every variable `attnd --help` lists is documented, and every one the files use exists", () => {
  const help = helpText();
  const vars = new Set(help.match(/\b(PORT|ATTND_[A-Z_]+)\b/g));
  assert.ok(vars.has("PORT") && vars.has("ATTND_THREADS") && vars.has("ATTND_DRAIN_DELAY"), help);
  // The options table, rows "| `--name` | `NAME` | default | ...", in
  // docs/operations.md.
  const docs = [DOCS].filter((f) => existsSync(f));
  assert.ok(docs.length, "docs/operations.md");
  const documented = new Set(docs.flatMap((f) => [...readFileSync(f, "utf8").matchAll(/^\| `--[a-z-]+` \| `([A-Z_]+)` \|/gm)].map((m) => m[1])));
  const undocumented = [...vars].filter((v) => !documented.has(v));
  assert.deepEqual(undocumented, [], `variables missing from the table in ${docs.map((f) => path.relative(ROOT, f)).join(" or ")}`);

  const df = dockerfile();
  const c = attndContainer(findKind(k8sObjects(), "Deployment"));
  const used = new Set([
    ...Object.keys(df.env), ...c.env.map((e) => e.name), ...Object.keys(compose().services.attnd.environment),
    ...documented,
  ]);
  // OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE are read by OpenBLAS itself.
  const unknown = [...used].filter((v) => !vars.has(v) && v !== "OPENBLAS_NUM_THREADS" && v !== "OPENBLAS_CORETYPE");
  assert.deepEqual(unknown, [], "variables that attnd does not read");
});

// -- starting it as the platforms do ------------------------------------------

// The port the daemon will listen on, and the environment adjusted for a run
// outside a private network namespace.
async function placePort(env, t) {
  if (IN_NETNS) return Number(env.PORT ?? 8080);
  const port = await freePort();
  t.diagnostic(`not in a private network namespace: PORT=${port} instead of ${env.PORT}`);
  env.PORT = String(port);
  return port;
}

function userOf(spec) {
  if (!IS_ROOT || !spec) return undefined;
  const [uid, gid] = String(spec).split(":").map(Number);
  return { uid, gid: gid ?? uid };
}

// Image argv: ENTRYPOINT then CMD, with the binary's image path mapped here.
function imageArgv(df) {
  const argv = [...df.entrypoint, ...df.cmd];
  argv[0] = hostPath(argv[0], df.entrypoint[0]);
  return argv;
}

function healthcheckArgv(df, cmd) {
  return cmd.map((a, i) => (i === 0 ? hostPath(a, df.entrypoint[0]) : a));
}

// Stops the process if a test failed half-way, so nothing is left running.
function reap(proc) {
  if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill("SIGKILL");
}

// Resolves once the child has exited, or fails after ms.
async function exitWithin(proc, ms) {
  const ac = new AbortController();
  const r = await Promise.race([proc.exited, sleep(ms, null, { signal: ac.signal }).catch(() => null)]);
  ac.abort();
  assert.ok(r, `attnd did not exit within ${ms} ms of SIGTERM:\n${proc.log()}`);
  return r;
}

test("docker run: ENV and ENTRYPOINT as in the image; HEALTHCHECK passes while it serves, fails once it stopped", async (t) => {
  const df = dockerfile();
  const env = { PATH: CONTAINER_PATH, HOME: "/", HOSTNAME: "attnd-test", ...df.env };
  const port = await placePort(env, t);
  const user = userOf(df.user);
  const proc = startProcess(imageArgv(df), env, user);
  t.after(() => reap(proc));
  const hc = healthcheckArgv(df, df.healthcheck.command);
  const healthy = await until(() => runSync(hc, env, 5000, user).status === 0, 15000, 100);
  assert.ok(healthy, `HEALTHCHECK ${hc.join(" ")} never passed:\n${proc.log()}`);

  for (const p of ["/healthz", "/livez", "/readyz"]) {
    const r = await request(port, "GET", p);
    assert.equal(r.status, 200, p);
    assert.deepEqual(JSON.parse(r.body), { status: "ok" }, p);
  }
  const res = await request(port, "POST", "/attend", { body: SMALL_ATTEND, headers: { "Content-Type": "application/json" } });
  assert.equal(smallAttendProblem(res), null);

  proc.child.kill("SIGTERM");
  const { code, signal } = await exitWithin(proc, 30000);
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, proc.log());
  assert.equal(runSync(hc, env, 5000, user).status, 1, "HEALTHCHECK must fail when nothing serves");
});

// The environment the kubelet gives the attnd container: the image's ENV,
// then the container's env with the downward API resolved (limits.cpu with
// divisor 1 is the limit rounded up to whole CPUs).
function kubeletEnv(df, c) {
  const env = { PATH: CONTAINER_PATH, HOME: "/", HOSTNAME: "attnd-5d9c7-abcde", ...df.env };
  for (const e of c.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.resourceFieldRef) {
      const ref = e.valueFrom.resourceFieldRef;
      assert.equal(ref.resource, "limits.cpu");
      const q = String(c.resources.limits.cpu);
      const cpus = q.endsWith("m") ? Number(q.slice(0, -1)) / 1000 : Number(q);
      env[e.name] = String(Math.ceil(cpus / Number(ref.divisor ?? 1)));
    } else throw new Error(`env ${e.name}: unsupported source`);
  }
  return env;
}

// A keep-alive connection for several requests in turn (as a client that
// opened it before the shutdown began).
function keepAlive(port) {
  const sock = net.connect({ host: "127.0.0.1", port });
  let buf = Buffer.alloc(0);
  let waiter = null;
  sock.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    waiter?.();
  });
  const ready = new Promise((resolve, reject) => {
    sock.once("connect", resolve);
    sock.once("error", reject);
  });
  const closed = new Promise((resolve) => {
    sock.once("end", resolve);
    sock.once("close", resolve);
  });
  return {
    closed,
    async get(path) {
      await ready;
      buf = Buffer.alloc(0);
      sock.write(`GET ${path} HTTP/1.1\r\nHost: localhost\r\n\r\n`);
      for (;;) {
        const sep = buf.indexOf("\r\n\r\n");
        if (sep >= 0) {
          const len = Number(/content-length:\s*(\d+)/i.exec(buf.subarray(0, sep).toString())?.[1] ?? 0);
          if (buf.length >= sep + 4 + len) return parseResponse(buf.subarray(0, sep + 4 + len));
        }
        await new Promise((resolve) => { waiter = resolve; });
      }
    },
    close: () => sock.destroy(),
  };
}

test("kubelet: Deployment env and user; startup, liveness, readiness probes and scrape; promtool; SIGTERM drains", async (t) => {
  const df = dockerfile();
  const deploy = findKind(k8sObjects(), "Deployment");
  const c = attndContainer(deploy);
  const env = kubeletEnv(df, c);
  const podPort = Number(c.ports[0].containerPort);
  const port = await placePort(env, t);
  const sc = deploy.spec.template.spec.securityContext;
  const user = userOf(`${sc.runAsUser}:${sc.runAsGroup}`);
  const proc = startProcess(imageArgv(df), env, user);
  t.after(() => reap(proc));
  const at = (p) => (resolvePort(c, p) === podPort ? port : NaN);

  // The kubelet's HTTP probe succeeds on 200..399.
  const probeOk = async (probe) => {
    const res = await request(at(probe.httpGet.port), "GET", probe.httpGet.path, { timeoutMs: probe.timeoutSeconds * 1000 });
    return res.status >= 200 && res.status < 400;
  };
  const sp = c.startupProbe;
  const started = await until(() => probeOk(sp), sp.periodSeconds * sp.failureThreshold * 1000, sp.periodSeconds * 100);
  assert.ok(started, `startupProbe ${sp.httpGet.path} never passed:\n${proc.log()}`);
  assert.ok(await probeOk(c.livenessProbe), "livenessProbe");
  assert.ok(await probeOk(c.readinessProbe), "readinessProbe");

  // Traffic for the counters, then the scrape Prometheus makes.
  const ok = await request(port, "POST", "/attend", { body: SMALL_ATTEND, headers: { "Content-Type": "application/json" } });
  assert.equal(smallAttendProblem(ok), null);
  const bad = await request(port, "POST", "/attend", { body: "{\"x\": 1}", headers: { "Content-Type": "application/json" } });
  assert.equal(bad.status, 422);
  assert.equal((await request(port, "GET", "/no-such-path")).status, 404);
  const ann = deploy.spec.template.metadata.annotations;
  const scrape = await request(at(Number(ann["prometheus.io/port"])), "GET", ann["prometheus.io/path"]);
  assert.equal(scrape.status, 200);
  assert.match(scrape.headers["content-type"], /^text\/plain; version=0\.0\.4/);
  const check = spawnSync(PROMTOOL, ["check", "metrics"], { input: scrape.body, encoding: "utf8" });
  assert.equal(check.status, 0, `promtool check metrics:\n${check.stdout}${check.stderr}\n${scrape.body}`);
  const series = (name, labels = "") => {
    const m = new RegExp(`^${name}${labels.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(scrape.body);
    return m ? Number(m[1]) : undefined;
  };
  assert.ok(series("attnd_http_requests_total", '{path="/attend",status="200"}') >= 1, scrape.body);
  assert.ok(series("attnd_http_requests_total", '{path="/attend",status="422"}') >= 1, scrape.body);
  // The downward API's CPU count reached the compute pool.
  assert.equal(series("attnd_compute_threads"), Number(env.ATTND_THREADS), scrape.body);

  // The pod is deleted: preStop's pause has passed, SIGTERM arrives while a
  // request is mid-upload and a client holds a kept-alive connection.
  const kept = keepAlive(port);
  t.after(() => kept.close());
  assert.equal((await kept.get(c.readinessProbe.httpGet.path)).status, 200);
  const upload = await startHeldUpload(port);
  proc.child.kill("SIGTERM");
  // New connections are refused once the shutdown has begun ...
  assert.ok(await until(() => refused(port), 10000), `attnd still accepts connections after SIGTERM:\n${proc.log()}`);
  // ... the kept-alive connection, idle between requests, is closed at once
  // (the preStop pause already gave clients their time) ...
  const timeout = (ms) => new Promise((resolve) => setTimeout(() => resolve(false), ms));
  assert.ok(await Promise.race([kept.closed.then(() => true), timeout(5000)]),
    `the idle connection stayed open after SIGTERM:\n${proc.log()}`);
  // ... and the upload that had not finished gets 503 with Retry-After: it
  // never started to compute, so its client retries it on another pod.
  const r = await upload.response;
  assert.equal(r.status, 503, r.body);
  assert.equal(JSON.parse(r.body).error.code, "unavailable");
  assert.ok(r.headers["retry-after"], "Retry-After");
  const { code, signal } = await exitWithin(proc, deploy.spec.template.spec.terminationGracePeriodSeconds * 1000);
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, proc.log());
});

// Sends the headers of a /attend request with `Expect: 100-continue` and
// waits for the server's 100 Continue, the sign that the request is in
// flight (the server has run its first callback); sendBody sends the body.
function startHeldUpload(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: "127.0.0.1", port });
    let buf = Buffer.alloc(0);
    let held = false;
    let settle;
    const response = new Promise((res, rej) => { settle = { res, rej }; });
    sock.on("error", (e) => (held ? settle.rej(e) : reject(e)));
    sock.on("connect", () => {
      sock.write("POST /attend HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        + `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(SMALL_ATTEND)}\r\n`
        + "Expect: 100-continue\r\n\r\n");
    });
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (!held) {
        const text = buf.toString("latin1");
        if (/^HTTP\/1\.1 100 [^\r]*\r\n\r\n/.test(text)) {
          held = true;
          buf = buf.subarray(buf.indexOf("\r\n\r\n") + 4);
          resolve({ response, sendBody: () => sock.write(SMALL_ATTEND) });
        } else if (/^HTTP\/1\.1 \d{3} [^\r]*\r\n[\s\S]*\r\n\r\n/.test(text)) {
          reject(new Error(`expected 100 Continue, got ${text.split("\r\n")[0]}`));
        }
      }
    });
    sock.on("end", () => {
      if (!held) return reject(new Error("closed before 100 Continue"));
      try {
        settle.res(parseResponse(buf));
      } catch (e) {
        settle.rej(e);
      }
    });
  });
}

test("docker compose: the service's environment and user; its healthcheck; SIGTERM turns /readyz 503 for the drain delay, exit 0", async (t) => {
  const df = dockerfile();
  const s = compose().services.attnd;
  const env = { PATH: CONTAINER_PATH, HOME: "/", HOSTNAME: "attnd", ...df.env, ...s.environment };
  const port = await placePort(env, t);
  const user = userOf(s.user);
  const proc = startProcess(imageArgv(df), env, user);
  t.after(() => reap(proc));
  const hc = healthcheckArgv(df, s.healthcheck.test.slice(1));
  assert.ok(await until(() => runSync(hc, env, 5000, user).status === 0, 15000, 100),
    `compose healthcheck never passed:\n${proc.log()}`);
  assert.equal((await request(port, "GET", "/readyz")).status, 200);

  // A request in mid-upload keeps the process serving however long the
  // drain takes, so what follows does not race the drain delay.
  const kept = keepAlive(port);
  t.after(() => kept.close());
  assert.equal((await kept.get("/readyz")).status, 200);
  const upload = await startHeldUpload(port);
  proc.child.kill("SIGTERM");
  const notReady = await until(async () => (await kept.get("/readyz")).status === 503, 10000, 20);
  assert.ok(notReady, `/readyz did not turn 503 after SIGTERM:\n${proc.log()}`);
  // Liveness holds while draining: a restart now would cut the requests off.
  assert.equal((await kept.get("/healthz")).status, 200);
  upload.sendBody();
  assert.equal(smallAttendProblem(await upload.response), null);
  const { code, signal } = await exitWithin(proc, 30000);
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, proc.log());
  // The daemon took the drain delay from the compose environment.
  assert.match(proc.log(), new RegExp(`"drain_delay_s":${Number(s.environment.ATTND_DRAIN_DELAY)}\\b`));
});

test("default port: with no configuration at all attnd serves on the image's port", async (t) => {
  if (!IN_NETNS) {
    t.skip("needs a private network namespace (the port may be taken on the host)");
    return;
  }
  const df = dockerfile();
  const proc = startProcess([imageBinary()], { PATH: CONTAINER_PATH });
  t.after(() => reap(proc));
  const port = Number(df.expose[0]);
  const up = await until(async () => (await request(port, "GET", "/healthz")).status === 200, 15000, 100);
  assert.ok(up, `nothing answered on :${port}:\n${proc.log()}`);
  proc.child.kill("SIGTERM");
  const { code } = await exitWithin(proc, 30000);
  assert.equal(code, 0, proc.log());
});
