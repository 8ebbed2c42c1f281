// dockerfile.mjs: what the checks need to know of the Dockerfile, read with
// dockerfile-ast (the parser behind dockerfile-utils): the runtime stage's
// environment, entry point, exposed ports, healthcheck, user, stop signal and
// the Debian packages it installs.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { DockerfileParser } = require("dockerfile-ast");

// The JSON (exec) form of an instruction's arguments, e.g. ENTRYPOINT ["a"].
// Throws on the shell form: the checks run the command without a shell, as
// the container runtime does for the exec form.
function execForm(text, what) {
  const s = text.trim();
  if (!s.startsWith("[")) throw new Error(`${what} must use the exec (JSON) form, found: ${s}`);
  const arr = JSON.parse(s);
  if (!Array.isArray(arr) || !arr.every((a) => typeof a === "string")) {
    throw new Error(`${what} must be a JSON array of strings, found: ${s}`);
  }
  return arr;
}

// Debian package names that the `apt-get install` commands of a RUN text
// install (options and shell operators skipped).
function aptInstalls(run) {
  const pkgs = [];
  for (const cmd of run.split(/&&|;|\|\|/)) {
    const words = cmd.trim().split(/\s+/);
    const at = words.findIndex((w, i) => w === "install"
      && words.slice(0, i).some((x) => /(^|\/)apt(-get)?$/.test(x)));
    if (at < 0) continue;
    for (const w of words.slice(at + 1)) {
      if (w.startsWith("-") || w === "\\" || w === "") continue;
      pkgs.push(w.replace(/[=:].*$/, ""));
    }
  }
  return pkgs;
}

// Parses the Dockerfile at `file`. Returns the text, the parsed document and
// a summary of its last (runtime) stage.
export function readDockerfile(file) {
  const text = readFileSync(file, "utf8");
  const df = DockerfileParser.parse(text);
  const instrs = df.getInstructions();
  const froms = df.getFROMs();
  const lastFrom = froms[froms.length - 1];
  const startLine = lastFrom.getRange().start.line;
  const runtime = instrs.filter((i) => i.getRange().start.line >= startLine);
  const one = (kw) => {
    const found = runtime.filter((i) => i.getKeyword() === kw);
    if (found.length > 1) throw new Error(`more than one ${kw} in the runtime stage`);
    return found[0];
  };

  const env = {};
  for (const i of runtime.filter((x) => x.getKeyword() === "ENV")) {
    for (const p of i.getProperties()) env[p.getName()] = p.getValue() ?? "";
  }
  const entry = one("ENTRYPOINT");
  const cmd = one("CMD");
  const hc = one("HEALTHCHECK");
  let healthcheck = null;
  if (hc) {
    const content = hc.getArgumentsContent();
    const flags = Object.fromEntries(hc.getFlags().map((f) => [f.getName(), f.getValue()]));
    const m = /^(?:--\S+\s+)*CMD\s+([\s\S]+)$/.exec(content.replace(/\\\n/g, " ").trim());
    if (!m) throw new Error(`HEALTHCHECK must run a command (CMD [...]), found: ${content}`);
    healthcheck = { flags, command: execForm(m[1], "HEALTHCHECK CMD") };
  }
  const expose = runtime.filter((i) => i.getKeyword() === "EXPOSE")
    .flatMap((i) => i.getArguments().map((a) => a.getValue()));
  const user = one("USER")?.getArgumentsContent().trim() ?? null;
  const stopsignal = one("STOPSIGNAL")?.getArgumentsContent().trim() ?? null;
  const packages = runtime.filter((i) => i.getKeyword() === "RUN")
    .flatMap((i) => aptInstalls(i.getArgumentsContent().replace(/\\\n/g, " ")));
  const buildRuns = instrs.filter((i) => i.getKeyword() === "RUN" && i.getRange().start.line < startLine)
    .map((i) => i.getArgumentsContent().replace(/\\\n/g, " ").replace(/\s+/g, " ").trim());
  const copies = runtime.filter((i) => i.getKeyword() === "COPY")
    .map((i) => ({
      flags: Object.fromEntries(i.getFlags().map((f) => [f.getName(), f.getValue()])),
      args: i.getArguments().map((a) => a.getValue()),
    }));

  return {
    text,
    froms: froms.map((f) => ({ image: f.getImage(), stage: f.getBuildStage() })),
    env,
    entrypoint: entry ? execForm(entry.getArgumentsContent(), "ENTRYPOINT") : [],
    cmd: cmd ? execForm(cmd.getArgumentsContent(), "CMD") : [],
    healthcheck,
    expose,
    user,
    stopsignal,
    packages,
    buildRuns,
    copies,
  };
}
