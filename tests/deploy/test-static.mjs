// test-static.mjs: offline checks of the Dockerfile, the Kubernetes manifests
// and the compose file, without a Docker engine or a cluster: they parse,
// validate against the Kubernetes API types (unknown fields included),
// render with kustomize, lint clean, and agree with one another on ports,
// user, probes and the environment.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

import {
  ROOT, K8S_DIR, COMPOSE_FILE, k8sFiles, k8sObjects, findKind, dockerfile,
  compose, attndContainer, resolvePort, composeContainerPort,
} from "./lib/common.mjs";
import { loadYaml, renderKustomization, kubectls, kubectlKustomize, canonical, keyOf } from "./lib/manifests.mjs";
import { strictCheck } from "./lib/k8s_strict.mjs";

const require = createRequire(import.meta.url);
const { validate: lintDockerfile } = require("dockerfile-utils");

// -- parsing and schema validation --------------------------------------------

test("deploy-yaml-parses: every YAML file under deploy/ parses (no duplicate keys)", () => {
  const files = [...k8sFiles(), COMPOSE_FILE];
  assert.ok(files.length >= 6, `expected the k8s manifests and the compose file, found ${files}`);
  for (const f of files) {
    const docs = loadYaml(f);
    assert.ok(docs.length >= 1, `${f}: no document`);
    for (const d of docs) assert.equal(typeof d, "object", `${f}: a document is not a mapping`);
  }
});

// kubernetes-models' class for an object: kubernetes-models/<apiVersion>/<kind>.
function modelClass(obj) {
  const mod = require(`kubernetes-models/${obj.apiVersion}/${obj.kind}`);
  return mod[obj.kind];
}

test("k8s-models: every manifest validates with kubernetes-models", () => {
  const objs = k8sObjects();
  assert.deepEqual(objs.map((o) => o.obj.kind).sort(),
    ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]);
  for (const { file, obj } of objs) {
    const Model = modelClass(obj);
    assert.doesNotThrow(() => new Model(obj).validate(), `${file}: ${obj.kind} fails kubernetes-models validation`);
  }
});

test("k8s-strict: no unknown, missing, read-only or wrongly typed field in any manifest", () => {
  for (const { file, obj } of k8sObjects()) {
    assert.deepEqual(strictCheck(obj), [], `${file}: ${obj.kind}`);
    assert.equal(obj.status, undefined, `${file}: a manifest must not carry status`);
  }
});

test("k8s-strict: the walk catches what kubernetes-models lets through", () => {
  const deploy = findKind(k8sObjects(), "Deployment");
  const bad = structuredClone(deploy);
  const c = attndContainer(bad);
  c.livenessProbe.httpGett = c.livenessProbe.httpGet;
  bad.spec.template.spec.terminationGracePeriod = 30;
  // kubernetes-models accepts both misspellings: the reason for the walk.
  const Model = modelClass(bad);
  assert.doesNotThrow(() => new Model(bad).validate());
  const errs = strictCheck(bad);
  assert.equal(errs.length, 2, errs.join("\n"));
  assert.ok(errs.some((e) => e.startsWith("/spec/template/spec/containers/0/livenessProbe/httpGett: unknown field")), errs.join("\n"));
  assert.ok(errs.some((e) => e.startsWith("/spec/template/spec/terminationGracePeriod: unknown field")), errs.join("\n"));

  const worse = structuredClone(deploy);
  attndContainer(worse).ports[0].containerPort = "8080";
  delete worse.spec.selector;
  const errs2 = strictCheck(worse);
  assert.ok(errs2.includes('/spec/template/spec/containers/0/ports/0/containerPort: expected number, found "8080"'), errs2.join("\n"));
  assert.ok(errs2.includes('/spec: missing required field "selector" of DeploymentSpec'), errs2.join("\n"));
});

// -- kustomize ----------------------------------------------------------------

test("kustomize: every manifest file is a resource of the kustomization", () => {
  const [k] = loadYaml(path.join(K8S_DIR, "kustomization.yaml"));
  const files = readdirSync(K8S_DIR).filter((f) => /\.ya?ml$/.test(f) && !/^kustomization\./.test(f)).sort();
  assert.deepEqual([...k.resources].sort(), files);
});

test("kustomize: deploy/k8s renders, and the rendered objects validate strictly", () => {
  const objs = renderKustomization(K8S_DIR);
  assert.equal(objs.length, 4);
  for (const o of objs) {
    assert.deepEqual(strictCheck(o), [], keyOf(o));
    const Model = modelClass(o);
    assert.doesNotThrow(() => new Model(o).validate(), keyOf(o));
    assert.equal(o.metadata.labels["app.kubernetes.io/part-of"], "attnd", keyOf(o));
  }
  const deploy = findKind(objs, "Deployment");
  assert.equal(deploy.spec.template.metadata.labels["app.kubernetes.io/part-of"], "attnd");
});

test("kustomize: `kubectl kustomize deploy/k8s` renders the same objects, with old and new kubectl", (t) => {
  const programs = kubectls();
  if (programs.length === 0) {
    t.skip("no kubectl (none on PATH, KUBECTL_DEBIAN unset): only the built-in rendering was checked");
    return;
  }
  const index = (objs) => Object.fromEntries(objs.map((o) => [keyOf(o), canonical(o)]));
  const ours = index(renderKustomization(K8S_DIR));
  for (const kubectl of programs) {
    t.diagnostic(`rendered with ${kubectl}`);
    assert.deepEqual(index(kubectlKustomize(kubectl, K8S_DIR)), ours, kubectl);
  }
});

// -- Dockerfile ---------------------------------------------------------------

test("dockerfile-lint: dockerfile-utils reports no problem", () => {
  const diags = lintDockerfile(dockerfile().text);
  assert.deepEqual(diags.map((d) => `line ${d.range.start.line + 1}: ${d.message}`), []);
});

test("dockerfile-lint: the linter does flag a broken Dockerfile", () => {
  const broken = dockerfile().text.replace("STOPSIGNAL SIGTERM", "stopsignal SIGTERM\nHEALTHCHECK NONE");
  assert.ok(lintDockerfile(broken).length >= 2);
});

// Seconds between the end of attnd's --shutdown-timeout and its exit: the
// cut-off computations stop at their next task, then the process frees and
// exits (measured well under 1 s; counted as 5 s for contended nodes).
const EXIT_AFTER_TIMEOUT_S = 5;
// Memory of the process itself beside what its limits bound: threads,
// OpenBLAS, the binary, thousands of connections (~1.3 KiB each).
const PROCESS_BASE_MIB = 128;

function mib(quantity) {
  const m = /^(\d+)(Mi|Gi)$/.exec(quantity);
  assert.ok(m, `memory quantity ${quantity} in Mi or Gi`);
  return Number(m[1]) * (m[2] === "Gi" ? 1024 : 1);
}

function debianCodename() {
  const m = /VERSION_CODENAME=(\w+)/.exec(readFileSync("/etc/os-release", "utf8"));
  return m ? m[1] : null;
}

test("dockerfile: two stages on CI's Debian release, built with the project's make targets", () => {
  const df = dockerfile();
  assert.equal(df.froms.length, 2);
  const [build, runtime] = df.froms;
  assert.equal(build.image, "debian:bookworm");
  assert.equal(runtime.image, "debian:bookworm-slim");
  const codename = debianCodename();
  if (codename) assert.equal(codename, "bookworm", "CI runs on this machine's Debian release; the image must match it");
  // The build stage installs the Makefile's DEB_PACKAGES and builds with the
  // targets CI runs, never a package list or compiler line of its own.
  assert.ok(df.buildRuns.some((r) => /^make deps\b/.test(r)), df.buildRuns.join("\n"));
  assert.ok(df.buildRuns.some((r) => /^make all\b/.test(r)), df.buildRuns.join("\n"));
  assert.ok(!df.buildRuns.some((r) => /\b(gcc|cc|clang)\s/.test(r)), "compiles outside make");
  const copy = df.copies.find((c) => c.flags.from === build.stage);
  assert.ok(copy, "the runtime stage copies the binary from the build stage");
  assert.deepEqual(copy.args, ["/src/build/attnd", df.entrypoint[0]]);
});

test("dockerfile: non-root, SIGTERM, healthcheck by the binary itself, configured by environment only", () => {
  const df = dockerfile();
  assert.match(df.user, /^\d+:\d+$/, "USER must be numeric so runAsNonRoot can verify it");
  assert.notEqual(Number(df.user.split(":")[0]), 0);
  assert.equal(df.stopsignal, "SIGTERM");
  assert.deepEqual(df.entrypoint, ["/usr/local/bin/attnd"]);
  assert.deepEqual(df.cmd, [], "no CMD arguments: configuration is through environment variables");
  assert.ok(df.healthcheck, "HEALTHCHECK");
  assert.deepEqual(df.healthcheck.command, [df.entrypoint[0], "--healthcheck"]);
  assert.equal(df.env.OPENBLAS_NUM_THREADS, "1");
  assert.deepEqual(df.packages.sort(), ["libmicrohttpd12", "libopenblas0-pthread", "libssl3"]);
});

// -- agreement between the files ----------------------------------------------

test("ports: Dockerfile EXPOSE and PORT, Deployment, probes, Service, scrape annotation and compose agree", () => {
  const df = dockerfile();
  assert.deepEqual(df.expose, ["8080"]);
  const port = Number(df.expose[0]);
  assert.equal(Number(df.env.PORT), port, "Dockerfile ENV PORT");

  const objs = k8sObjects();
  const deploy = findKind(objs, "Deployment");
  const c = attndContainer(deploy);
  assert.deepEqual(c.ports.map((p) => p.containerPort), [port]);
  const envPort = c.env.find((e) => e.name === "PORT");
  if (envPort) assert.equal(Number(envPort.value), port, "Deployment env PORT");
  for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    assert.equal(resolvePort(c, c[probe].httpGet.port), port, `${probe} port`);
  }
  const ann = deploy.spec.template.metadata.annotations;
  assert.equal(Number(ann["prometheus.io/port"]), port);

  const svc = findKind(objs, "Service");
  for (const p of svc.spec.ports) assert.equal(resolvePort(c, p.targetPort ?? p.port), port, "Service targetPort");

  const svcCompose = compose().services.attnd;
  assert.deepEqual(svcCompose.ports.map(composeContainerPort), [port]);
  assert.equal(Number(svcCompose.environment.PORT ?? df.env.PORT), port, "compose PORT");
});

test("k8s: probes name the service's health paths, with a startup probe before them", () => {
  const c = attndContainer(findKind(k8sObjects(), "Deployment"));
  assert.equal(c.livenessProbe.httpGet.path, "/healthz");
  assert.equal(c.readinessProbe.httpGet.path, "/readyz");
  assert.ok(["/healthz", "/livez"].includes(c.startupProbe.httpGet.path));
  // The startup probe allows at least 10 s for the process to listen before
  // the liveness probe may restart it.
  assert.ok(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold >= 10);
  // One slow answer under load must not restart a pod.
  assert.ok(c.livenessProbe.failureThreshold >= 3);
});

test("k8s: resources, threads from the CPU limit, and a single OpenBLAS thread", () => {
  const c = attndContainer(findKind(k8sObjects(), "Deployment"));
  for (const kind of ["requests", "limits"]) {
    for (const r of ["cpu", "memory"]) assert.ok(c.resources[kind][r] !== undefined, `resources.${kind}.${r}`);
  }
  const env = Object.fromEntries(c.env.map((e) => [e.name, e]));
  assert.deepEqual(env.ATTND_THREADS.valueFrom.resourceFieldRef,
    { containerName: c.name, resource: "limits.cpu", divisor: "1" });
  assert.equal(env.OPENBLAS_NUM_THREADS.value, "1");
});

test("k8s: draining: preStop pause, grace period beyond it and attnd's shutdown timeout", () => {
  const df = dockerfile();
  const deploy = findKind(k8sObjects(), "Deployment");
  const c = attndContainer(deploy);
  const cmd = c.lifecycle.preStop.exec.command;
  assert.equal(cmd[0], "/bin/sleep", "the runtime image (debian slim) has /bin/sleep and no shell is needed");
  const pause = Number(cmd[1]);
  assert.ok(pause >= 3 && pause <= 15, `preStop pause ${pause} s`);
  // attnd bounds its own drain: from SIGTERM to exit takes at most
  // ATTND_SHUTDOWN_TIMEOUT, however many slow or idle clients it holds, so
  // the grace period need only cover the pause and that.
  const env = Object.fromEntries(c.env.map((e) => [e.name, e.value]));
  const shutdownS = Number(env.ATTND_SHUTDOWN_TIMEOUT);
  assert.ok(shutdownS >= 1, "ATTND_SHUTDOWN_TIMEOUT is set, so the drain time is bounded");
  const drainS = pause + shutdownS + EXIT_AFTER_TIMEOUT_S;
  const grace = deploy.spec.template.spec.terminationGracePeriodSeconds;
  assert.ok(grace >= drainS, `terminationGracePeriodSeconds ${grace} < ${drainS}`);
  // Without ATTND_DRAIN_DELAY the preStop pause does the waiting; the daemon
  // must not wait a second time.
  assert.equal(c.env.find((e) => e.name === "ATTND_DRAIN_DELAY"), undefined);
  assert.equal(df.env.ATTND_DRAIN_DELAY, undefined);
});

test("k8s: the memory limit holds what attnd's limits bound", () => {
  // Working memory of the requests computing, the bodies being received and
  // the tensor store are each bounded by a setting; their sum and the
  // process itself must fit the container's limit, or a burst within every
  // limit could still get the pod OOM-killed.
  const c = attndContainer(findKind(k8sObjects(), "Deployment"));
  const env = Object.fromEntries(c.env.map((e) => [e.name, e.value]));
  const inFlight = Number(env.ATTND_MAX_IN_FLIGHT);
  const requestB = Number(env.ATTND_MAX_REQUEST_BYTES);
  const bufferedB = Number(env.ATTND_MAX_BUFFERED_BYTES);
  const storeB = Number(env.ATTND_TENSOR_STORE_BYTES ?? 256 * 1024 * 1024);
  assert.ok(inFlight >= 1 && requestB >= 1 && bufferedB >= 1,
    "ATTND_MAX_IN_FLIGHT, ATTND_MAX_REQUEST_BYTES and ATTND_MAX_BUFFERED_BYTES are set");
  const needMiB = (inFlight * requestB + bufferedB + storeB) / (1 << 20) + PROCESS_BASE_MIB;
  const limitMiB = mib(c.resources.limits.memory);
  assert.ok(needMiB <= limitMiB, `the limits need ${needMiB} MiB, the container may use ${limitMiB} MiB`);
});

test("k8s: non-root, read-only root filesystem, no privilege escalation, user matches the image", () => {
  const df = dockerfile();
  const deploy = findKind(k8sObjects(), "Deployment");
  const pod = deploy.spec.template.spec;
  const c = attndContainer(deploy);
  assert.equal(pod.securityContext.runAsNonRoot, true);
  assert.equal(`${pod.securityContext.runAsUser}:${pod.securityContext.runAsGroup}`, df.user);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  assert.deepEqual(c.securityContext.capabilities.drop, ["ALL"]);
  // Service links would put ATTND_PORT=tcp://..., ATTND_SERVICE_HOST and
  // more (from the Service named attnd) into the environment, the prefix of
  // attnd's own variables.
  assert.equal(pod.enableServiceLinks, false);
  assert.equal(pod.automountServiceAccountToken, false, "attnd never calls the API server");
});

test("k8s: the Service keeps a client on one replica, whose tensor store holds its uploads", () => {
  const svc = findKind(k8sObjects(), "Service");
  assert.equal(svc.spec.sessionAffinity, "ClientIP");
  const timeout = svc.spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
  // Set explicitly (the documented value), within Kubernetes' bounds.
  assert.ok(Number.isInteger(timeout) && timeout >= 60 && timeout <= 86400,
    `sessionAffinityConfig.clientIP.timeoutSeconds ${timeout}`);
});

test("k8s: scrape annotations, labels and selectors tie the objects together", () => {
  const objs = k8sObjects();
  const deploy = findKind(objs, "Deployment");
  const podLabels = deploy.spec.template.metadata.labels;
  const matches = (sel) => Object.entries(sel).every(([k, v]) => podLabels[k] === v);
  const ann = deploy.spec.template.metadata.annotations;
  assert.equal(ann["prometheus.io/scrape"], "true");
  assert.equal(ann["prometheus.io/path"], "/metrics");

  assert.ok(matches(deploy.spec.selector.matchLabels), "Deployment selector");
  assert.ok(matches(findKind(objs, "Service").spec.selector), "Service selector");
  assert.ok(matches(findKind(objs, "PodDisruptionBudget").spec.selector.matchLabels), "PDB selector");

  const hpa = findKind(objs, "HorizontalPodAutoscaler");
  assert.deepEqual(hpa.spec.scaleTargetRef, { apiVersion: deploy.apiVersion, kind: "Deployment", name: deploy.metadata.name });
  assert.ok(hpa.spec.minReplicas >= 2, "two pods at least, so the PDB lets one go");
  assert.ok(hpa.spec.maxReplicas > hpa.spec.minReplicas);
  assert.deepEqual(hpa.spec.metrics.map((m) => m.resource.name), ["cpu"]);
  // The HPA owns the replica count; a fixed one would be reset on every apply.
  assert.equal(deploy.spec.replicas, undefined);

  const [k] = loadYaml(path.join(K8S_DIR, "kustomization.yaml"));
  const img = attndContainer(deploy).image.split(":")[0];
  assert.ok(k.images.some((i) => i.name === img), "the kustomization's images entry names the container image");
});

// -- compose ------------------------------------------------------------------

// Keys of the Compose specification used or allowed here (a service's
// top-level keys, its build and healthcheck keys); anything else is a typo.
const COMPOSE_TOP = new Set(["name", "services", "networks", "volumes", "secrets", "configs", "include"]);
const COMPOSE_SERVICE = new Set([
  "annotations", "attach", "build", "blkio_config", "cap_add", "cap_drop", "cgroup", "cgroup_parent",
  "command", "configs", "container_name", "cpu_count", "cpu_percent", "cpu_period", "cpu_quota",
  "cpu_rt_period", "cpu_rt_runtime", "cpu_shares", "cpus", "cpuset", "credential_spec", "depends_on",
  "deploy", "develop", "device_cgroup_rules", "devices", "dns", "dns_opt", "dns_search", "domainname",
  "entrypoint", "env_file", "environment", "expose", "extends", "external_links", "extra_hosts", "gpus",
  "group_add", "healthcheck", "hostname", "image", "init", "ipc", "isolation", "label_file", "labels",
  "links", "logging", "mac_address", "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit",
  "network_mode", "networks", "oom_kill_disable", "oom_score_adj", "pid", "pids_limit", "platform",
  "ports", "post_start", "pre_stop", "privileged", "profiles", "pull_policy", "read_only", "restart",
  "runtime", "scale", "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period",
  "stop_signal", "storage_opt", "sysctls", "tmpfs", "tty", "ulimits", "user", "userns_mode", "uts",
  "volumes", "volumes_from", "working_dir",
]);
const COMPOSE_BUILD = new Set(["context", "dockerfile", "dockerfile_inline", "args", "ssh", "cache_from",
  "cache_to", "additional_contexts", "entitlements", "extra_hosts", "isolation", "labels", "network",
  "no_cache", "platforms", "privileged", "pull", "secrets", "shm_size", "tags", "target", "ulimits"]);
const COMPOSE_HEALTH = new Set(["disable", "interval", "retries", "start_interval", "start_period", "test", "timeout"]);

test("compose: known keys only; healthcheck, user, signal and build agree with the Dockerfile", () => {
  const df = dockerfile();
  const c = compose();
  const unknown = [];
  for (const k of Object.keys(c)) if (!COMPOSE_TOP.has(k)) unknown.push(`/${k}`);
  const s = c.services.attnd;
  assert.ok(s, "service attnd");
  for (const k of Object.keys(s)) if (!COMPOSE_SERVICE.has(k)) unknown.push(`/services/attnd/${k}`);
  for (const k of Object.keys(s.build)) if (!COMPOSE_BUILD.has(k)) unknown.push(`/services/attnd/build/${k}`);
  for (const k of Object.keys(s.healthcheck)) if (!COMPOSE_HEALTH.has(k)) unknown.push(`/services/attnd/healthcheck/${k}`);
  assert.deepEqual(unknown, []);

  assert.deepEqual(s.healthcheck.test, ["CMD", ...df.healthcheck.command]);
  // Same timing as the image's HEALTHCHECK, so `docker run` and Compose
  // report health alike.
  const f = df.healthcheck.flags;
  assert.deepEqual([s.healthcheck.interval, s.healthcheck.timeout, s.healthcheck.start_period, String(s.healthcheck.retries)],
    [f.interval, f.timeout, f["start-period"], f.retries]);
  assert.equal(s.user, df.user);
  assert.equal(s.stop_signal, df.stopsignal);
  assert.equal(s.read_only, true);
  assert.equal(path.resolve(path.dirname(COMPOSE_FILE), s.build.context, s.build.dockerfile),
    path.join(ROOT, "Dockerfile"));
  assert.equal(s.environment.OPENBLAS_NUM_THREADS, "1");
  // The limits that bound memory and the drain are the Deployment's.
  const podEnv = attndContainer(findKind(k8sObjects(), "Deployment")).env;
  for (const v of ["ATTND_MAX_IN_FLIGHT", "ATTND_MAX_REQUEST_BYTES", "ATTND_MAX_BUFFERED_BYTES",
    "ATTND_BODY_TIMEOUT", "ATTND_SHUTDOWN_TIMEOUT"]) {
    assert.equal(s.environment[v], podEnv.find((e) => e.name === v).value, v);
  }
  const grace = Number(/^(\d+)s$/.exec(s.stop_grace_period)?.[1]);
  const deploy = findKind(k8sObjects(), "Deployment");
  assert.ok(grace >= deploy.spec.template.spec.terminationGracePeriodSeconds, "stop_grace_period");
});
