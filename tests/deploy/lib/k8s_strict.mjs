// k8s_strict.mjs: a strict walk of a Kubernetes object against the API types.
//
// kubernetes-models validates types and formats but lets unknown fields
// through (its schemas allow additional properties), so a misspelt
// `livenessProbe.httpGett` would pass it and be dropped silently by the API
// server. This walk reads the field tables of the `kubernetes-types` package
// (TypeScript declarations generated from the Kubernetes OpenAPI document,
// one interface per definition) and reports every field that the matching
// definition does not declare, every required field that is missing, every
// read-only field (status) that is set, and values of the wrong JSON type.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const TYPES_ROOT = path.dirname(require.resolve("kubernetes-types/package.json"));

// Quantity is declared as `string` but the API server also accepts a JSON
// number (`cpu: 1`), as do kubectl and kubernetes-models.
const QUANTITY = { kind: "union", members: [{ kind: "prim", name: "string" }, { kind: "prim", name: "number" }] };

const modules = new Map(); // module path relative to TYPES_ROOT -> parsed module

function stripComments(src) {
  return src.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/[^\n]*/g, "");
}

// Index of the brace that closes the one at `open`.
function matchBrace(src, open) {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    if (src[i] === "{") depth++;
    else if (src[i] === "}" && --depth === 0) return i;
  }
  throw new Error(`unbalanced braces at ${open}`);
}

// Splits an interface body into `name?: type` members at top-level `;`.
function splitMembers(body) {
  const out = [];
  let depth = 0, start = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c === "{" || c === "<" || c === "(" || c === "[") depth++;
    else if (c === "}" || c === ">" || c === ")" || c === "]") depth--;
    else if (c === ";" && depth === 0) {
      const m = body.slice(start, i).trim();
      if (m) out.push(m);
      start = i + 1;
    }
  }
  const rest = body.slice(start).trim();
  if (rest) out.push(rest);
  return out;
}

// Splits `a | b` at top level.
function splitUnion(t) {
  const out = [];
  let depth = 0, start = 0;
  for (let i = 0; i < t.length; i++) {
    const c = t[i];
    if (c === "{" || c === "<" || c === "(" || c === "[") depth++;
    else if (c === "}" || c === ">" || c === ")" || c === "]") depth--;
    else if (c === "|" && depth === 0) {
      out.push(t.slice(start, i).trim());
      start = i + 1;
    }
  }
  out.push(t.slice(start).trim());
  return out;
}

function loadModule(rel) {
  if (modules.has(rel)) return modules.get(rel);
  const file = path.join(TYPES_ROOT, `${rel}.d.ts`);
  const src = stripComments(readFileSync(file, "utf8"));
  const mod = { rel, imports: new Map(), interfaces: new Map(), aliases: new Map() };
  modules.set(rel, mod);
  for (const m of src.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    const target = path.posix.join(path.posix.dirname(rel), m[2]);
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      mod.imports.set(name, target);
    }
  }
  for (const m of src.matchAll(/export\s+type\s+(\w+)\s*=\s*([^;]+);/g)) {
    mod.aliases.set(m[1], m[2].trim());
  }
  const re = /export\s+interface\s+(\w+)\s*\{/g;
  let m;
  while ((m = re.exec(src)) !== null) {
    const open = m.index + m[0].length - 1;
    const close = matchBrace(src, open);
    const props = new Map();
    for (const member of splitMembers(src.slice(open + 1, close))) {
      const pm = /^(readonly\s+)?("?)([\w$.\-/]+)\2(\?)?\s*:\s*([\s\S]+)$/.exec(member);
      if (!pm) throw new Error(`${rel}: cannot read member of ${m[1]}: ${member}`);
      props.set(pm[3], { readonly: !!pm[1], optional: !!pm[4], type: pm[5].trim() });
    }
    mod.interfaces.set(m[1], props);
    re.lastIndex = close;
  }
  return mod;
}

// Turns a declared type string, seen from module `mod`, into a descriptor.
function resolveType(mod, t) {
  t = t.trim();
  if (t === "string" || t === "number" || t === "boolean") return { kind: "prim", name: t };
  if (t === "any" || t === "unknown" || t === "object") return { kind: "any" };
  if (/^"[^"]*"$/.test(t)) return { kind: "literal", value: JSON.parse(t) };
  const union = splitUnion(t);
  if (union.length > 1) return { kind: "union", members: union.map((u) => resolveType(mod, u)) };
  let am = /^Array<([\s\S]+)>$/.exec(t) || /^([\w.]+)\[\]$/.exec(t);
  if (am) return { kind: "array", item: resolveType(mod, am[1]) };
  am = /^\{\s*\[\w+:\s*string\]\s*:\s*([\s\S]+?);?\s*\}$/.exec(t);
  if (am) return { kind: "map", value: resolveType(mod, am[1]) };
  if (/^\w+$/.test(t)) {
    if (t === "Quantity") return QUANTITY;
    if (mod.interfaces.has(t)) return { kind: "object", mod, name: t };
    if (mod.aliases.has(t)) return resolveType(mod, mod.aliases.get(t));
    if (mod.imports.has(t)) return resolveType(loadModule(mod.imports.get(t)), t);
  }
  throw new Error(`${mod.rel}: unsupported type ${t}`);
}

function typeName(d) {
  switch (d.kind) {
    case "prim": return d.name;
    case "literal": return JSON.stringify(d.value);
    case "union": return d.members.map(typeName).join(" | ");
    case "array": return `array of ${typeName(d.item)}`;
    case "map": return `map of ${typeName(d.value)}`;
    case "object": return d.name;
    default: return "any";
  }
}

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function walk(value, d, ptr, errors) {
  switch (d.kind) {
    case "any":
      return;
    case "prim": {
      const ok = d.name === "number" ? typeof value === "number" && Number.isFinite(value)
        : typeof value === d.name;
      if (!ok) errors.push(`${ptr || "/"}: expected ${d.name}, found ${JSON.stringify(value)}`);
      return;
    }
    case "literal":
      if (value !== d.value) errors.push(`${ptr}: expected ${JSON.stringify(d.value)}, found ${JSON.stringify(value)}`);
      return;
    case "union": {
      for (const member of d.members) {
        const sub = [];
        walk(value, member, ptr, sub);
        if (sub.length === 0) return;
      }
      errors.push(`${ptr}: expected ${typeName(d)}, found ${JSON.stringify(value)}`);
      return;
    }
    case "array":
      if (!Array.isArray(value)) {
        errors.push(`${ptr}: expected ${typeName(d)}, found ${JSON.stringify(value)}`);
        return;
      }
      value.forEach((v, i) => walk(v, d.item, `${ptr}/${i}`, errors));
      return;
    case "map":
      if (!isPlainObject(value)) {
        errors.push(`${ptr}: expected ${typeName(d)}, found ${JSON.stringify(value)}`);
        return;
      }
      for (const [k, v] of Object.entries(value)) walk(v, d.value, `${ptr}/${escapePointer(k)}`, errors);
      return;
    case "object": {
      if (!isPlainObject(value)) {
        errors.push(`${ptr || "/"}: expected a ${d.name} object, found ${JSON.stringify(value)}`);
        return;
      }
      const props = d.mod.interfaces.get(d.name);
      for (const [k, v] of Object.entries(value)) {
        const p = props.get(k);
        const here = `${ptr}/${escapePointer(k)}`;
        if (!p) {
          errors.push(`${here}: unknown field "${k}" of ${d.name} (known: ${[...props.keys()].join(", ")})`);
          continue;
        }
        if (p.readonly) {
          errors.push(`${here}: "${k}" of ${d.name} is read-only (set by the server)`);
          continue;
        }
        walk(v, resolveType(d.mod, p.type), here, errors);
      }
      for (const [k, p] of props) {
        if (!p.optional && !(k in value)) errors.push(`${ptr || "/"}: missing required field "${k}" of ${d.name}`);
      }
      return;
    }
    default:
      throw new Error(`bad descriptor ${d.kind}`);
  }
}

function escapePointer(k) {
  return String(k).replace(/~/g, "~0").replace(/\//g, "~1");
}

// The kubernetes-types module of an apiVersion: "v1" is core/v1,
// "apps/v1" is apps/v1, "policy/v1" policy/v1, "networking.k8s.io/v1"
// networking/v1 (the group's first label).
function moduleOf(apiVersion) {
  const parts = String(apiVersion).split("/");
  if (parts.length === 1) return `core/${parts[0]}`;
  return `${parts[0].split(".")[0]}/${parts[1]}`;
}

// Errors (strings, each starting with a JSON Pointer) of one object; an empty
// array when it is a valid, complete object of a known apiVersion and kind.
export function strictCheck(obj) {
  if (!isPlainObject(obj)) return ["/: not an object"];
  if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
    return ["/: apiVersion and kind must be strings"];
  }
  let mod;
  try {
    mod = loadModule(moduleOf(obj.apiVersion));
  } catch {
    return [`/apiVersion: unknown API version ${obj.apiVersion}`];
  }
  if (!mod.interfaces.has(obj.kind)) return [`/kind: no kind ${obj.kind} in ${obj.apiVersion}`];
  const errors = [];
  walk(obj, { kind: "object", mod, name: obj.kind }, "", errors);
  return errors;
}
