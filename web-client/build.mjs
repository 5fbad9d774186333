// Builds the page's bundle into src/betcode/web/static/ (app.js, app.css, sw.js the service
// worker, and relay.html: the same page as index.html for a relay's address; git-ignored: made
// by scripts/setup), or with --tests the unit tests into build/test/ for `node --test`.
import { build } from "esbuild";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
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
  const staticDir = `${here}../src/betcode/web/static`;
  const result = await build({
    // sw: the service worker, served at the root (its scope the whole origin).
    entryPoints: { app: `${here}src/main.ts`, sw: `${here}src/sw.ts` },
    outdir: staticDir,
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
  // The relay serves the app at its address as relay.html: the page tells by `data-origin`.
  const page = readFileSync(`${staticDir}/index.html`, "utf8");
  const relayPage = page.replace('<html lang="en">', '<html lang="en" data-origin="relay">');
  if (relayPage === page) throw new Error("index.html has no <html lang=\"en\"> to mark for the relay");
  writeFileSync(`${staticDir}/relay.html`, relayPage);
  console.log("static/relay.html: index.html for a relay's address");
}
