// build-image.mjs: builds the Dockerfile into root filesystems under
// $IMAGE_DIR (default build/image) without a Docker engine (lib/image.mjs)
// and writes the image's configuration to $IMAGE_DIR/image.json for
// test-image.mjs. Needs root and the Debian archive; the first run
// debootstraps Debian 12 (about 2 minutes), later runs reuse it.

import { writeFileSync } from "node:fs";
import path from "node:path";

import { ROOT } from "./lib/common.mjs";
import { buildImage } from "./lib/image.mjs";

const outDir = path.resolve(process.env.IMAGE_DIR ?? path.join(ROOT, "build/image"));
const t0 = Date.now();
const image = buildImage(ROOT, outDir, (m) => console.log(`[${((Date.now() - t0) / 1000).toFixed(0)} s] ${m}`));
writeFileSync(path.join(outDir, "image.json"), `${JSON.stringify(image, null, 2)}\n`);
console.log(`image built in ${((Date.now() - t0) / 1000).toFixed(0)} s: ${path.join(outDir, "image.json")}`);
