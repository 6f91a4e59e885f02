// The README's examples marked `<!-- replayed by test/readme.test.mjs -->`, each run as it is
// written, in a process of its own, against a real server: `new Redis()` and BullMQ's
// `{ host: "localhost", port: 6379 }` pointed at the test server, nothing else changed. Each
// must exit 0 by itself (its connections closed) and leave no client on the server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, assertNoClientsLeft, PATIENCE } from "./helpers.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const MARK = "<!-- replayed by test/readme.test.mjs -->";

/** Each marked block with the heading it is under. */
function examples() {
  const found = [];
  let heading = "";
  const lines = readme.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith("#")) heading = lines[i].replace(/^#+\s*/, "");
    if (lines[i].trim() !== MARK) continue;
    assert.equal(lines[i + 1], "```js", `a marked example is a js block (README line ${i + 2})`);
    const end = lines.indexOf("```", i + 2);
    found.push({ name: `${heading} (README line ${i + 2})`, code: lines.slice(i + 2, end).join("\n") });
  }
  return found;
}

let server, dir;
before(async () => {
  server = await startServer();
  // Inside the package, so that `import ... from "redis-unique"` resolves to this package.
  dir = mkdtempSync(join(here, ".readme-"));
});
after(() => {
  rmSync(dir, { recursive: true, force: true });
  server?.stop();
});

test("the README has replayed examples", () => {
  assert.ok(examples().length >= 3);
});

for (const [i, { name, code }] of examples().entries()) {
  test(`README example: ${name}`, async () => {
    const port = server.port;
    const pointed = code
      .replaceAll("new Redis()", `new Redis(${port})`)
      .replaceAll('{ host: "localhost", port: 6379 }', `{ host: "127.0.0.1", port: ${port} }`);
    assert.ok(pointed !== code, "the example connects to Redis");
    const file = join(dir, `example-${i}.mjs`);
    writeFileSync(file, pointed);
    const child = spawn(process.execPath, [file], { stdio: ["ignore", "inherit", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill("SIGKILL"), PATIENCE);
    const [status, signal] = await new Promise((r) => child.on("exit", (c, s) => r([c, s])));
    clearTimeout(timer);
    assert.equal(status, 0, `exit ${status ?? signal} (killed after ${PATIENCE} ms if it never exited): ${stderr}`);
    await assertNoClientsLeft(port);
  });
}
