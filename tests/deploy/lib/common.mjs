// common.mjs: paths and the parsed deployment files shared by the checks.

import path from "node:path";
import { fileURLToPath } from "node:url";
import { readdirSync } from "node:fs";

import { readDockerfile } from "./dockerfile.mjs";
import { loadYaml } from "./manifests.mjs";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const K8S_DIR = path.join(ROOT, "deploy/k8s");
export const COMPOSE_FILE = path.join(ROOT, "deploy/docker-compose.yml");
export const DOCKERFILE = path.join(ROOT, "Dockerfile");
export const DOCS = path.join(ROOT, "docs", "operations.md");

export function k8sFiles() {
  return readdirSync(K8S_DIR).filter((f) => /\.ya?ml$/.test(f)).sort()
    .map((f) => path.join(K8S_DIR, f));
}

// Every Kubernetes object of deploy/k8s (the kustomization excluded).
export function k8sObjects() {
  return k8sFiles().filter((f) => !/kustomization\.ya?ml$/.test(f))
    .flatMap((f) => loadYaml(f).map((obj) => ({ file: path.relative(ROOT, f), obj })));
}

export function findKind(objs, kind) {
  const found = objs.filter((o) => (o.obj ?? o).kind === kind).map((o) => o.obj ?? o);
  if (found.length !== 1) throw new Error(`expected exactly one ${kind}, found ${found.length}`);
  return found[0];
}

export function dockerfile() {
  return readDockerfile(DOCKERFILE);
}

export function compose() {
  const [c] = loadYaml(COMPOSE_FILE);
  return c;
}

// The attnd container of the Deployment.
export function attndContainer(deploy) {
  const cs = deploy.spec.template.spec.containers.filter((c) => c.name === "attnd");
  if (cs.length !== 1) throw new Error("the Deployment needs exactly one container named attnd");
  return cs[0];
}

// A probe's or Service's port (a number or a container port name) as the
// container port number it names; undefined when no such port exists.
export function resolvePort(container, port) {
  if (typeof port === "number") return port;
  const p = (container.ports ?? []).find((x) => x.name === port);
  return p?.containerPort;
}

// The container-side port of a compose "host:container[/proto]" mapping.
export function composeContainerPort(mapping) {
  const s = String(mapping).replace(/\/(tcp|udp)$/, "");
  return Number(s.split(":").pop());
}
