// The helpers' startServer when its free port is taken before the server binds it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import IORedis from "ioredis";
import { freePort, startServer, SERVER } from "./helpers.mjs";

let other;
let held;
before(async () => {
  other = await startServer({ module: false });
  // A port that the server cannot bind and where nothing answers.
  held = createServer((socket) => socket.destroy());
  await new Promise((res) => held.listen(0, "127.0.0.1", res));
});
after(() => {
  other?.stop();
  held?.close();
});

test("a taken port is retried on a new one, and only this child's server counts", async () => {
  // Try 1: the port is held, the server exits; try 2: another server answers there.
  const ports = [held.address().port, other.port];
  const server = await startServer({ pickPort: () => ports.shift() ?? freePort() });
  const r = new IORedis({ port: server.port });
  try {
    assert.ok(![held.address().port, other.port].includes(server.port));
    assert.match(await r.info("server"), new RegExp(`^process_id:${server.pid}\\r?$`, "m"));
    assert.match(readFileSync(join(server.dir, "redis-try-1.log"), "utf8"), /in use/);
  } finally {
    r.disconnect();
    server.stop();
  }
});

test("five failed tries name the binary and the logs", async () => {
  const err = await startServer({ module: false, pickPort: () => held.address().port }).catch((e) => e);
  assert.ok(err instanceof Error);
  const [, dir] = /; see (.*)\/redis-try-\*\.log$/.exec(err.message);
  try {
    assert.ok(err.message.startsWith(`${SERVER} did not start in 5 tries`));
    assert.deepEqual(readdirSync(dir).sort(), [1, 2, 3, 4, 5].map((n) => `redis-try-${n}.log`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
