// manifests.mjs: reads the YAML files of deploy/ strictly, and renders the
// kustomization both with `kubectl kustomize` (when kubectl is installed) and
// with a small renderer of our own that supports exactly the kustomization
// fields deploy/k8s uses (resources, images), so the checks of the rendered
// objects run on machines without kubectl too.

import { existsSync, readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { parseAllDocuments } from "yaml";

// All documents of a YAML file as plain JS values. Throws with file, line and
// message on any parse error or warning (duplicate keys included).
export function loadYaml(file) {
  const text = readFileSync(file, "utf8");
  const docs = parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true, strict: true });
  const out = [];
  for (const d of docs) {
    const problems = [...d.errors, ...d.warnings];
    if (problems.length) throw new Error(`${file}: ${problems.map((e) => e.message).join("; ")}`);
    const v = d.toJS({ maxAliasCount: 0 });
    if (v !== null && v !== undefined) out.push(v);
  }
  return out;
}

// Fields of a Kustomization the renderer below implements; any other field
// makes it refuse rather than render something different from kubectl.
const SUPPORTED = new Set(["apiVersion", "kind", "resources", "images"]);
const IMAGE_KEYS = new Set(["name", "newName", "newTag", "digest"]);

function splitImage(ref) {
  const at = ref.indexOf("@");
  const base = at >= 0 ? ref.slice(0, at) : ref;
  const slash = base.lastIndexOf("/");
  const colon = base.lastIndexOf(":");
  if (colon > slash) return { name: base.slice(0, colon), tag: base.slice(colon + 1) };
  return { name: base, tag: null };
}

function podTemplates(obj) {
  const t = obj?.spec?.template;
  return t && typeof t === "object" ? [t] : [];
}

// Renders dir/kustomization.yaml: the resources in order, with the image
// overrides applied as kustomize applies them.
export function renderKustomization(dir) {
  const [k] = loadYaml(path.join(dir, "kustomization.yaml"));
  for (const key of Object.keys(k)) {
    if (!SUPPORTED.has(key)) throw new Error(`kustomization field "${key}" is not supported by this renderer`);
  }
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") {
    throw new Error("kustomization.yaml: apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization");
  }
  const objs = (k.resources ?? []).flatMap((r) => loadYaml(path.join(dir, r)));
  for (const img of k.images ?? []) {
    for (const key of Object.keys(img)) {
      if (!IMAGE_KEYS.has(key)) throw new Error(`images entry field "${key}" is not supported`);
    }
    for (const o of objs) {
      for (const t of podTemplates(o)) {
        const spec = t.spec ?? {};
        for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
          const cur = splitImage(c.image);
          if (cur.name !== img.name) continue;
          const name = img.newName ?? cur.name;
          if (img.digest) c.image = `${name}@${img.digest}`;
          else if (img.newTag) c.image = `${name}:${img.newTag}`;
          else c.image = cur.tag ? `${name}:${cur.tag}` : name;
        }
      }
    }
  }
  return objs;
}

// The kubectl programs to render with: the one on PATH (kustomize v5 in
// recent releases) and Debian 12's kubernetes-client (kubectl 1.20, kustomize
// v2.0.3) that mk/deploy.mk unpacks, given as KUBECTL_DEBIAN; the manifests
// must render with old and new alike.
export function kubectls() {
  const out = [];
  const which = spawnSync("sh", ["-c", "command -v kubectl"], { encoding: "utf8" });
  if (which.status === 0) out.push(which.stdout.trim());
  const deb = process.env.KUBECTL_DEBIAN;
  if (deb && existsSync(deb)) out.push(deb);
  return out;
}

// `kubectl kustomize dir` as objects. Throws with kubectl's message when it
// fails to render.
export function kubectlKustomize(kubectl, dir) {
  const r = spawnSync(kubectl, ["kustomize", dir], { encoding: "utf8", timeout: 60000 });
  if (r.status !== 0) throw new Error(`${kubectl} kustomize ${dir} failed: ${r.stderr || r.error}`);
  return parseAllDocuments(r.stdout).map((d) => d.toJS()).filter((v) => v != null);
}

// Sorts object keys recursively so two renderings compare as values.
export function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === "object") {
    return Object.fromEntries(Object.keys(v).sort().map((key) => [key, canonical(v[key])]));
  }
  return v;
}

export function keyOf(o) {
  return `${o.apiVersion}/${o.kind}/${o.metadata?.name}`;
}
