// Builds the page's bundle into src/betcode/web/static/ (app.js, app.css; git-ignored: made by
// scripts/setup), or with --tests the unit tests into build/test/ for `node --test`.
import { build } from "esbuild";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const tests = process.argv.includes("--tests");

if (tests) {
  await build({
    entryPoints: readdirSync(`${here}test`).filter((f) => f.endsWith(".test.ts")).map((f) => `${here}test/${f}`),
    outdir: `${here}build/test`,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
  });
} else {
  const result = await build({
    entryPoints: { app: `${here}src/main.ts`, relay: `${here}src/relay.ts` },
    outdir: `${here}../src/betcode/web/static`,
    bundle: true,
    minify: true,
    format: "iife",
    target: ["es2020", "chrome100", "safari15"],
    legalComments: "none",
    metafile: true,
    logLevel: "warning",
  });
  for (const [file, output] of Object.entries(result.metafile.outputs)) {
    console.log(`${file.replace(/^.*static\//, "static/")}: ${(output.bytes / 1024).toFixed(1)} KiB`);
  }
}
