// `npm pack` gives an installable package: installed into a fresh directory, it loads
// from ESM and CommonJS, with its type declarations, and talks to a real server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, symlinkSync, existsSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, assertNoClientsLeft } from "./helpers.mjs";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
let server, dir;
before(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), "redis-unique-pack-"));
});
after(async () => {
  if (server) await assertNoClientsLeft(server.port);
  server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("npm pack installs into a fresh directory and works from ESM and CommonJS", () => {
  const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const tarball = npm(["pack", "--silent", "--pack-destination", dir], PACKAGE).trim().split("\n").pop();
  const app = join(dir, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  // The package has no dependency of its own; ioredis is the user's (linked, not downloaded).
  npm(["install", "--offline", "--no-audit", "--no-fund", join(dir, tarball)], app);
  symlinkSync(join(PACKAGE, "node_modules/ioredis"), join(app, "node_modules/ioredis"));
  const installed = join(app, "node_modules/redis-unique");
  for (const f of ["dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts", "dist/esm/bullmq.js", "README.md", "CHANGELOG.md"]) {
    assert.ok(existsSync(join(installed, f)), `${f} is in the package`);
  }
  assert.ok(!existsSync(join(installed, "test")), "no tests in the package");
  const script = (body) => `const client = new Client(new Redis({ port: ${server.port} }));
${body}
const token = await client.lock("pack:k", "j", { ttl: 1000 });
if (typeof token !== "number") throw new Error("no token");
console.log("ok", typeof Mutex, await client.unlock("pack:k", "j"));
process.exit(0);`;
  writeFileSync(join(app, "esm.mjs"), `import { Client, Mutex } from "redis-unique";\nimport Redis from "ioredis";\n${script("")}`);
  writeFileSync(join(app, "cjs.cjs"), `const { Client, Mutex } = require("redis-unique");\nconst Redis = require("ioredis");\n(async () => {\n${script("")}\n})();`);
  assert.equal(execFileSync(process.execPath, ["esm.mjs"], { cwd: app, encoding: "utf8" }).trim(), "ok function true");
  assert.equal(execFileSync(process.execPath, ["cjs.cjs"], { cwd: app, encoding: "utf8" }).trim(), "ok function true");
});
