// attnd.mjs: starting build/attnd the way a container runtime does (argv and
// environment given, nothing inherited) and talking to it over loopback with
// plain sockets, so every byte and every connection is under the test's
// control.

import { spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

export const ATTND_BIN = process.env.ATTND_BIN;

// The binary the processes run: a private copy, as the image has its own,
// so a concurrent relink of build/attnd (a shared build tree) cannot swap it
// mid-test, and readable by the image's user whatever the checkout's modes.
let imageCopy = null;
export function imageBinary() {
  if (!imageCopy) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "attnd-deploy-"));
    chmodSync(dir, 0o755);
    imageCopy = path.join(dir, "attnd");
    copyFileSync(ATTND_BIN, imageCopy);
    chmodSync(imageCopy, 0o755);
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return imageCopy;
}

// True when the checks run in a private network namespace (mk/deploy.mk),
// where the image's own port is free for the daemon.
export const IN_NETNS = process.env.ATTND_DEPLOY_NETNS === "1";

// The PATH a Debian image's containers start with (the docker default).
export const CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Maps a path inside the image to the file here: only the binary differs.
export function hostPath(imagePath, entrypoint0) {
  return imagePath === entrypoint0 ? imageBinary() : imagePath;
}

// Starts argv with exactly env. Returns { child, log() } where log() is
// everything it wrote so far; user = {uid, gid} runs it as that user.
export function startProcess(argv, env, user) {
  const opts = { env, stdio: ["ignore", "pipe", "pipe"] };
  if (user) Object.assign(opts, user);
  const child = spawn(argv[0], argv.slice(1), opts);
  let out = "";
  child.stdout.on("data", (d) => { out += d; });
  child.stderr.on("data", (d) => { out += d; });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return { child, exited, log: () => out };
}

// Runs argv with env to completion (the HEALTHCHECK command). Returns its
// exit status, or null when it had to be killed after timeoutMs.
export function runSync(argv, env, timeoutMs, user) {
  const opts = { env, encoding: "utf8", timeout: timeoutMs };
  if (user) Object.assign(opts, user);
  const r = spawnSync(argv[0], argv.slice(1), opts);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, error: r.error };
}

// One HTTP/1.1 exchange on a new connection. Resolves to { status, headers,
// body } or rejects with the socket error (ECONNREFUSED when nothing
// listens).
export function request(port, method, path, { body = null, headers = {}, timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: "127.0.0.1", port });
    const chunks = [];
    sock.setTimeout(timeoutMs, () => sock.destroy(new Error(`${method} ${path}: no answer in ${timeoutMs} ms`)));
    sock.on("connect", () => {
      const buf = body === null ? Buffer.alloc(0) : Buffer.from(body);
      const h = { Host: "localhost", Connection: "close", ...headers };
      if (body !== null) h["Content-Length"] = String(buf.length);
      const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`;
      sock.write(Buffer.concat([Buffer.from(head), buf]));
    });
    sock.on("data", (d) => chunks.push(d));
    sock.on("error", reject);
    sock.on("end", () => {
      try {
        resolve(parseResponse(Buffer.concat(chunks)));
      } catch (e) {
        reject(e);
      }
    });
  });
}

export function parseResponse(raw) {
  const sep = raw.indexOf("\r\n\r\n");
  if (sep < 0) throw new Error(`incomplete HTTP response: ${JSON.stringify(raw.toString().slice(0, 200))}`);
  const lines = raw.subarray(0, sep).toString("latin1").split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
  if (!m) throw new Error(`bad status line ${lines[0]}`);
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = raw.subarray(sep + 4);
  if (/chunked/i.test(headers["transfer-encoding"] ?? "")) body = dechunk(body);
  return { status: Number(m[1]), headers, body: body.toString("utf8") };
}

function dechunk(buf) {
  const out = [];
  let p = 0;
  for (;;) {
    const eol = buf.indexOf("\r\n", p);
    const size = parseInt(buf.subarray(p, eol).toString(), 16);
    if (!size) break;
    out.push(buf.subarray(eol + 2, eol + 2 + size));
    p = eol + 2 + size + 2;
  }
  return Buffer.concat(out);
}

// Polls until fn() resolves truthy, at most timeoutMs; returns its last value.
export async function until(fn, timeoutMs, stepMs = 50) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch {
      last = undefined;
    }
    if (Date.now() > end) return last;
    await sleep(stepMs);
  }
}

// A free TCP port on loopback (for runs outside a private namespace).
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

// True when nothing accepts connections on port.
export async function refused(port) {
  try {
    await request(port, "GET", "/healthz", { timeoutMs: 2000 });
    return false;
  } catch (e) {
    return e.code === "ECONNREFUSED";
  }
}

// A small /attend request whose answer is known in closed form: x, W_q, W_k
// and W_v are the 2x2 identity, so S = I / sqrt(2) and each output row is the
// softmax of its score row: [s, 1 - s] with s = 1 / (1 + e^(-1/sqrt(2))).
export const SMALL_ATTEND = JSON.stringify({
  x: [[1, 0], [0, 1]],
  w_q: [[1, 0], [0, 1]],
  w_k: [[1, 0], [0, 1]],
  w_v: [[1, 0], [0, 1]],
  return_weights: "none",
});
const S = 1 / (1 + Math.exp(-1 / Math.SQRT2));
export const SMALL_ATTEND_OUTPUT = [[S, 1 - S], [1 - S, S]];

// Checks a response to SMALL_ATTEND within the contract's tolerance
// 1e-4 * (1 + |reference|); returns a problem or null.
export function smallAttendProblem(res) {
  if (res.status !== 200) return `status ${res.status}: ${res.body.slice(0, 300)}`;
  const out = JSON.parse(res.body).output;
  for (let i = 0; i < 2; i++) {
    for (let j = 0; j < 2; j++) {
      const ref = SMALL_ATTEND_OUTPUT[i][j];
      if (!(Math.abs(out[i][j] - ref) <= 1e-4 * (1 + Math.abs(ref)))) {
        return `output[${i}][${j}] = ${out[i][j]}, expected ${ref}`;
      }
    }
  }
  return null;
}
