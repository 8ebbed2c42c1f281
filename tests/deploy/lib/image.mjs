// image.mjs: builds the Dockerfile without a Docker engine, into plain root
// filesystems under build/image/, by carrying out its instructions itself:
// FROM debian:bookworm[-slim] is a debootstrap'd minbase Debian 12 (cached),
// RUN runs in a chroot with /dev and /proc mounted in a private mount
// namespace, COPY copies from the build context (filtered by .dockerignore)
// or from an earlier stage, and ENV, WORKDIR, USER, EXPOSE, STOPSIGNAL,
// HEALTHCHECK and ENTRYPOINT are recorded as the image's configuration.
//
// Only the instructions and forms this project's Dockerfile uses are
// implemented; anything else stops the build with an error. Needs root
// (debootstrap, chroot, mount) and the Debian archive.

import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const { DockerfileParser } = require("dockerfile-ast");

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const MIRROR = "http://deb.debian.org/debian";
const BASES = new Set(["debian:bookworm", "debian:bookworm-slim"]);

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 1 << 28, ...opts });
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal}):\n${(r.stdout ?? "").slice(-4000)}${(r.stderr ?? "").slice(-4000)}`);
  }
  return r.stdout;
}

function shq(s) {
  return `'${String(s).replace(/'/g, "'\\''")}'`;
}

// .dockerignore patterns as one predicate over context-relative paths: a
// path is excluded when it or one of its parent folders matches a pattern.
function dockerignore(root) {
  const file = path.join(root, ".dockerignore");
  if (!existsSync(file)) return () => false;
  const res = readFileSync(file, "utf8").split("\n").map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((p) => {
      if (p.startsWith("!")) throw new Error(`.dockerignore exception ${p} is not supported`);
      const body = p.replace(/^\/+|\/+$/g, "").split("/").map((seg) => (seg === "**" ? "(?:.*)"
        : seg.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]")))
        .join("/").replace(/\(\?:\.\*\)\//g, "(?:.*/)?");
      return new RegExp(`^${body}$`);
    });
  return (rel) => {
    const parts = rel.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join("/");
      if (res.some((re) => re.test(prefix))) return true;
    }
    return false;
  };
}

// Copies the build context (root minus .dockerignore) to dest.
function makeContext(root, dest) {
  const ignored = dockerignore(root);
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  const files = [];
  const walk = (rel) => {
    for (const name of readdirSync(path.join(root, rel))) {
      const r = rel ? `${rel}/${name}` : name;
      if (ignored(r)) continue;
      const st = statSync(path.join(root, r), { throwIfNoEntry: false });
      if (!st) continue;
      if (st.isDirectory()) walk(r);
      else files.push(r);
    }
  };
  walk("");
  run("tar", ["-C", root, "-cf", `${dest}.tar`, "--", ...files]);
  run("tar", ["-C", dest, "-xf", `${dest}.tar`]);
  rmSync(`${dest}.tar`);
  return files.length;
}

// apt and dpkg settings the official debian images carry over a minbase
// system: apt keeps no downloaded packages or caches, and the -slim variant
// installs no documentation, manual pages or translations.
const DOCKER_CLEAN = `DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
`;
const SLIM_EXCLUDES = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
`;

function officialSettings(dir, image) {
  writeFileSync(path.join(dir, "etc/apt/apt.conf.d/docker-clean"), DOCKER_CLEAN);
  if (image.endsWith("-slim")) {
    mkdirSync(path.join(dir, "etc/dpkg/dpkg.cfg.d"), { recursive: true });
    writeFileSync(path.join(dir, "etc/dpkg/dpkg.cfg.d/docker"), SLIM_EXCLUDES);
  }
}

// A cached minbase Debian 12 root filesystem, unpacked fresh into dir.
function baseRootfs(cacheDir, dir, log) {
  const tarball = path.join(cacheDir, "bookworm-minbase.tar");
  if (!existsSync(tarball)) {
    const tmp = path.join(cacheDir, "bootstrap.tmp");
    rmSync(tmp, { recursive: true, force: true });
    log(`debootstrap --variant=minbase bookworm (once; cached in ${tarball})`);
    run("debootstrap", ["--variant=minbase", "bookworm", tmp, MIRROR]);
    // What the official images carry over minbase: no apt caches.
    run("sh", ["-c", `rm -rf ${shq(tmp)}/var/cache/apt/archives/*.deb ${shq(tmp)}/var/lib/apt/lists/*`]);
    run("tar", ["-C", tmp, "-cf", `${tarball}.part`, "."]);
    run("mv", [`${tarball}.part`, tarball]);
    rmSync(tmp, { recursive: true, force: true });
  }
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  run("tar", ["-C", dir, "-xf", tarball]);
}

// Runs a shell command in the chroot at rootfs, as root, with /dev, /proc
// and the host's resolv.conf (for apt), all in a private mount namespace so
// nothing stays mounted afterwards.
function chrootRun(rootfs, workdir, env, command) {
  const envArgs = Object.entries(env).map(([k, v]) => shq(`${k}=${v}`)).join(" ");
  const script = [
    "set -e",
    `R=${shq(rootfs)}`,
    'mount --rbind /dev "$R/dev"',
    'mount -t proc proc "$R/proc"',
    'cp /etc/resolv.conf "$R/etc/resolv.conf"',
    `exec chroot "$R" /usr/bin/env -i ${envArgs} /bin/sh -c ${shq(`cd ${workdir} && ${command}`)}`,
  ].join("\n");
  return run("unshare", ["--mount", "--", "sh", "-c", script]);
}

// Builds every stage of the Dockerfile at root into outDir/<stage>. Returns
// the image configuration of the last stage and its root filesystem.
export function buildImage(root, outDir, log = () => {}) {
  mkdirSync(outDir, { recursive: true });
  const context = path.join(outDir, "context");
  const n = makeContext(root, context);
  log(`context: ${n} files`);
  const df = DockerfileParser.parse(readFileSync(path.join(root, "Dockerfile"), "utf8"));
  const stages = new Map();
  let cur = null;
  for (const ins of df.getInstructions()) {
    const kw = ins.getKeyword();
    const args = ins.getArguments().map((a) => a.getValue());
    const text = ins.getArgumentsContent()?.replace(/\\\n/g, " ") ?? "";
    if (kw === "FROM") {
      const image = args[0];
      if (!BASES.has(image)) throw new Error(`FROM ${image}: only ${[...BASES].join(", ")} are built here`);
      const name = args[2] ?? `stage${stages.size}`;
      cur = { name, image, rootfs: path.join(outDir, name), env: { PATH: DEFAULT_PATH }, workdir: "/", config: {} };
      stages.set(name, cur);
      log(`FROM ${image} AS ${name}`);
      baseRootfs(outDir, cur.rootfs, log);
      officialSettings(cur.rootfs, image);
      continue;
    }
    if (!cur) throw new Error(`${kw} before FROM`);
    switch (kw) {
      case "RUN":
        log(`RUN ${text.replace(/\s+/g, " ").slice(0, 100)}`);
        chrootRun(cur.rootfs, cur.workdir, cur.env, text);
        break;
      case "WORKDIR":
        cur.workdir = path.posix.resolve(cur.workdir, args[0]);
        mkdirSync(path.join(cur.rootfs, cur.workdir), { recursive: true });
        break;
      case "ENV":
        for (const p of ins.getProperties()) cur.env[p.getName()] = p.getValue() ?? "";
        break;
      case "COPY": {
        const flags = Object.fromEntries(ins.getFlags().map((f) => [f.getName(), f.getValue()]));
        const unknownFlags = Object.keys(flags).filter((f) => f !== "from");
        if (unknownFlags.length) throw new Error(`COPY --${unknownFlags[0]} is not supported`);
        const srcRoot = flags.from ? stages.get(flags.from)?.rootfs : context;
        if (!srcRoot) throw new Error(`COPY --from=${flags.from}: no such stage`);
        const [src, dst] = args;
        if (args.length !== 2 || /[*?[]/.test(src)) throw new Error(`COPY ${text}: one plain source only`);
        const from = path.join(srcRoot, src);
        const to = path.join(cur.rootfs, path.posix.resolve(cur.workdir, dst));
        if (statSync(from).isDirectory()) {
          mkdirSync(to, { recursive: true });
          run("cp", ["-a", `${from}/.`, to]);
        } else {
          const target = dst.endsWith("/") ? path.join(to, path.basename(src)) : to;
          mkdirSync(path.dirname(target), { recursive: true });
          run("cp", ["-a", from, target]);
        }
        log(`COPY ${flags.from ? `--from=${flags.from} ` : ""}${src} ${dst}`);
        break;
      }
      case "USER":
        cur.config.user = args[0];
        break;
      case "EXPOSE":
        cur.config.expose = args;
        break;
      case "STOPSIGNAL":
        cur.config.stopsignal = args[0];
        break;
      case "HEALTHCHECK": {
        const m = /CMD\s+(\[[\s\S]*\])\s*$/.exec(text);
        if (!m) throw new Error("HEALTHCHECK must be CMD [...]");
        cur.config.healthcheck = JSON.parse(m[1]);
        break;
      }
      case "ENTRYPOINT":
        cur.config.entrypoint = JSON.parse(text);
        break;
      case "CMD":
        cur.config.cmd = JSON.parse(text);
        break;
      default:
        throw new Error(`${kw} is not supported by this builder`);
    }
  }
  const last = [...stages.values()].pop();
  return { rootfs: last.rootfs, env: last.env, ...last.config, stages: [...stages.keys()] };
}

// A CPU quota of `cpus` for the processes the returned cgroup directory
// holds, as `docker run --cpus` sets one: cgroup v2 (cpu.max) when the host
// has a cpu controller there, else v1 (cfs quota). Returns { dir, version,
// remove() }, or null when this host has neither or forbids it.
export function cpuQuotaCgroup(cpus) {
  const name = `attnd-image-${process.pid}-${Date.now()}`;
  const period = 100000;
  const tries = [
    () => {
      const root = "/sys/fs/cgroup";
      if (!readFileSync(`${root}/cgroup.controllers`, "utf8").split(/\s+/).includes("cpu")) return null;
      if (!readFileSync(`${root}/cgroup.subtree_control`, "utf8").includes("cpu")) {
        writeFileSync(`${root}/cgroup.subtree_control`, "+cpu");
      }
      const dir = `${root}/${name}`;
      mkdirSync(dir);
      writeFileSync(`${dir}/cpu.max`, `${cpus * period} ${period}`);
      return { dir, version: 2 };
    },
    () => {
      const root = "/sys/fs/cgroup/cpu";
      if (!existsSync(`${root}/cpu.cfs_quota_us`)) return null;
      const dir = `${root}/${name}`;
      mkdirSync(dir);
      writeFileSync(`${dir}/cpu.cfs_period_us`, String(period));
      writeFileSync(`${dir}/cpu.cfs_quota_us`, String(cpus * period));
      return { dir, version: 1 };
    },
  ];
  for (const attempt of tries) {
    let cg = null;
    try {
      cg = attempt();
    } catch {
      cg = null;
    }
    if (cg) return { ...cg, remove: () => rmdirSync(cg.dir) };
  }
  return null;
}

// argv for running cmd inside the image as `docker run --read-only
// --tmpfs /tmp` runs its processes: in a private mount namespace (no fork,
// so the returned command's pid becomes cmd's and signals reach it), the
// root filesystem bind-mounted read-only, /tmp a tmpfs, /proc and /dev
// mounted, and cmd started by chroot as the image's user with exactly the
// image's environment. With cgroup (from cpuQuotaCgroup), the process joins
// it and sees it where a container sees its own (/sys/fs/cgroup, or
// /sys/fs/cgroup/cpu on v1). The network namespace is the caller's.
export function inImage(image, cmd, cgroup = null) {
  const [uid, gid] = image.user.split(":");
  const envArgs = Object.entries(image.env).map(([k, v]) => shq(`${k}=${v}`)).join(" ");
  const cg = cgroup ? [
    `echo $$ > ${shq(`${cgroup.dir}/cgroup.procs`)}`,
    'mount -t tmpfs -o size=1m tmpfs "$R/sys"',
    `mkdir -p "$R/sys/fs/cgroup${cgroup.version === 1 ? "/cpu" : ""}"`,
    `mount --bind ${shq(cgroup.dir)} "$R/sys/fs/cgroup${cgroup.version === 1 ? "/cpu" : ""}"`,
  ] : [];
  const script = [
    "set -e",
    `R=${shq(image.rootfs)}`,
    'mount --bind "$R" "$R"',
    'mount -o remount,bind,ro "$R"',
    'mount -t tmpfs -o size=16m tmpfs "$R/tmp"',
    'mount -t proc proc "$R/proc"',
    'mount --rbind /dev "$R/dev"',
    ...cg,
    `exec chroot --userspec=${uid}:${gid} "$R" /usr/bin/env -i ${envArgs} ${cmd.map(shq).join(" ")}`,
  ].join("\n");
  return ["unshare", "--mount", "--", "sh", "-c", script];
}
