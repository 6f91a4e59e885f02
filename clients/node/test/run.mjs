// `npm test`: every test/*.test.mjs in an order drawn from a seed, one `node --test` per
// file. Node 20's runner sorts the files it is given and cannot shuffle tests, so the
// order of the files is what the seed decides (the tests inside a file keep theirs).
//   TEST_SEED=1234 npm test            replays an order (the seed is printed first)
//   npm test -- test/locks.test.mjs    runs only the files given
//   TEST_SKIP=pack npm test            leaves out files whose name contains a word of the list
// (make test-compat skips pack.test.mjs per server: packing does not depend on the server).
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join, relative } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const seed = process.env.TEST_SEED ? Number(process.env.TEST_SEED) : Math.floor(Math.random() * 65535);
if (!Number.isInteger(seed) || seed < 0) throw new Error(`TEST_SEED must be an integer >= 0, not ${process.env.TEST_SEED}`);
const skip = (process.env.TEST_SKIP ?? "").split(/[\s,]+/).filter(Boolean);
let files = process.argv.slice(2);
if (files.length === 0) {
  files = readdirSync(here).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => join(here, f));
}
files = files.filter((f) => !skip.some((word) => f.includes(word)));

// mulberry32: a small PRNG, so that a seed gives the same order on every machine.
let state = seed >>> 0;
const random = () => {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
for (let i = files.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [files[i], files[j]] = [files[j], files[i]];
}
const names = files.map((f) => relative(process.cwd(), f));
console.log(`# node tests: seed ${seed} (TEST_SEED=${seed} npm test replays it), files: ${names.join(" ")}`);

const failed = [];
for (const file of names) {
  // --test-force-exit: a test that failed before closing its connections would otherwise
  // keep the file's process alive (reconnecting to a stopped server) and the suite hung.
  const { status, signal } = spawnSync(process.execPath, ["--test", "--test-force-exit", file], { stdio: "inherit" });
  if (status !== 0) failed.push(`${file} (${signal ?? `exit ${status}`})`);
}
if (failed.length) {
  console.log(`# failed: ${failed.join(", ")}; seed ${seed}`);
  process.exit(1);
}
