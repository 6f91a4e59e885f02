// The connections a wait blocks on: bounded, reused, and closed when idle, on close() and
// when the Redis connection they were duplicated from ends, so that nothing is left open
// on the server and a process that quits its client exits by itself.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";
import { createClient } from "redis";
import { Client, Mutex, Semaphore } from "../dist/esm/index.js";
import { startServer, waitFor, clientCount, assertNoClientsLeft } from "./helpers.mjs";

let server, admin;
before(async () => {
  server = await startServer();
  admin = new IORedis({ port: server.port });
});
after(async () => {
  await admin.quit();
  await assertNoClientsLeft(server.port);
  server?.stop();
});

/** A holder takes `key`, `waiter` waits for it (seen by the server), the holder releases, the waiter gets it. */
async function waitedRound(redis, key, waiter) {
  const holder = new Mutex(redis, key);
  await holder.acquire();
  const acquired = waiter.acquire();
  await waitFor(async () => (await holder.client.waiters(key)) === 1, { message: "the waiter" });
  await holder.release();
  await acquired;
  assert.equal(waiter.isAcquired, true);
  await waiter.release();
}

test("many waiting acquires leave no connection behind once the Redis client quits", async () => {
  const start = await clientCount(admin);
  const redis = new IORedis({ port: server.port });
  for (let i = 0; i < 30; i++) await waitedRound(redis, "conn:seq", new Mutex(redis, "conn:seq"));
  // 30 lock objects, one at a time: one wait connection, reused, not 30
  assert.ok((await clientCount(admin)) <= start + 2, `at most the client and one wait connection: ${await clientCount(admin)}`);
  await redis.quit();
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

test("concurrent waits stay within maxWaitConnections, and idle ones close by themselves", async () => {
  const start = await clientCount(admin);
  const redis = new IORedis({ port: server.port });
  const client = new Client(redis, { maxWaitConnections: 4, idleTimeout: 200 });
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await clientCount(admin));
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  // 24 workers on a Semaphore of 2, each waiting its turn three times
  await Promise.all(Array.from({ length: 24 }, async () => {
    const sem = new Semaphore(client, "conn:sem", 2, { acquireTimeout: 30_000 });
    for (let i = 0; i < 3; i++) {
      await sem.acquire();
      await new Promise((r) => setTimeout(r, 1));
      await sem.release();
    }
  }));
  sampling = false;
  await sampler;
  assert.ok(peak > start + 1, "waits did use wait connections");
  assert.ok(peak <= start + 1 + 4, `at most the client and 4 wait connections, saw ${peak - start}`);
  await waitFor(async () => (await clientCount(admin)) === start + 1, { message: "idle wait connections to close" });
  assert.equal(client.waitConnections, 0);
  await client.close();
  await redis.quit();
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

test("a wait queued for a connection honours its timeout and its AbortSignal", async () => {
  const start = await clientCount(admin);
  const redis = new IORedis({ port: server.port });
  const client = new Client(redis, { maxWaitConnections: 1 });
  const holder = new Mutex(client, "conn:q");
  await holder.acquire();
  const first = new Mutex(client, "conn:q", { acquireTimeout: 30_000 });
  const firstWait = first.tryAcquire();
  await waitFor(async () => (await client.waiters("conn:q")) === 1, { message: "the first waiter" });
  // the only wait connection is busy: these two queue in the client
  const timed = new Mutex(client, "conn:q", { acquireTimeout: 100 });
  assert.equal(await timed.tryAcquire(), false, "queued past its acquireTimeout");
  const controller = new AbortController();
  const aborted = new Mutex(client, "conn:q", { acquireTimeout: 30_000 }).acquire(controller.signal);
  controller.abort(new Error("no longer needed"));
  await assert.rejects(aborted, /no longer needed/);
  await holder.release();
  assert.equal(await firstWait, true);
  await first.release();
  await client.close();
  await redis.quit();
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

test("close() ends a wait in progress with a clear error, and the server forgets the waiter", async () => {
  const start = await clientCount(admin);
  const redis = new IORedis({ port: server.port });
  const client = new Client(redis);
  const holder = new Mutex(client, "conn:close");
  await holder.acquire();
  const waiting = new Mutex(client, "conn:close", { acquireTimeout: 60_000 }).acquire();
  await waitFor(async () => (await client.waiters("conn:close")) === 1, { message: "the waiter" });
  await client.close();
  await assert.rejects(waiting, /Client was closed/);
  await waitFor(async () => (await admin.call("UNIQUE.WAITERS", "conn:close")) === 0, { message: "the server to forget it" });
  await holder.release().catch(() => {}); // its client is closed, its connection is not
  await assert.rejects(client.lock("conn:close", "x", { wait: 10 }), /closed/);
  await redis.quit();
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

test("enableOfflineQueue: false and lazyConnect: a waiting acquire waits for its connection to be ready", async () => {
  const start = await clientCount(admin);
  for (const options of [{ enableOfflineQueue: false }, { lazyConnect: true }]) {
    const redis = new IORedis({ port: server.port, ...options });
    if (options.lazyConnect) await redis.connect();
    else await waitFor(() => redis.status === "ready", { message: "ready" });
    const key = `conn:offline:${Object.keys(options)[0]}`;
    await waitedRound(redis, key, new Mutex(redis, key));
    await redis.quit();
  }
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

// A real process: it takes and waits for locks over ioredis or node-redis, quits its
// client, and must then exit by itself (nothing left holding its event loop).
const CHILD = `
import { Mutex, Semaphore } from ${JSON.stringify(new URL("../dist/esm/index.js", import.meta.url).href)};
const [flavour, port, key] = process.argv.slice(1);
let redis, quit;
if (flavour === "ioredis") {
  const { default: IORedis } = await import("ioredis");
  redis = new IORedis({ port: Number(port) });
  quit = () => redis.quit();
} else {
  const { createClient } = await import("redis");
  redis = await createClient({ socket: { port: Number(port), host: "127.0.0.1" } }).connect();
  quit = () => redis.close?.() ?? redis.quit();
}
for (let round = 0; round < 5; round++) {
  const holders = Array.from({ length: 2 }, () => new Semaphore(redis, key, 2));
  for (const h of holders) await h.acquire();
  const waiters = Array.from({ length: 4 }, () => new Mutex(redis, key + ":m"));
  const sems = Array.from({ length: 4 }, () => new Semaphore(redis, key, 2, { acquireTimeout: 30000 }));
  const waits = sems.map((s) => s.acquire().then(() => s.release()));
  await new Promise((r) => setTimeout(r, 20));
  for (const h of holders) await h.release();
  await Promise.all(waits);
  for (const w of waiters) { await w.acquire(); await w.release(); }
}
await quit();
console.log("done");
`;

for (const flavour of ["ioredis", "node-redis"]) {
  test(`a process that quits its ${flavour} client after waiting acquires exits by itself`, async () => {
    const start = await clientCount(admin);
    const child = spawn(process.execPath, ["--input-type=module", "-e", CHILD, flavour, String(server.port), `conn:child:${flavour}`], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
    const bound = new Promise((resolve) => setTimeout(() => resolve(null), 30_000).unref());
    const result = await Promise.race([exited, bound]);
    if (result === null) child.kill("SIGKILL");
    assert.notEqual(result, null, "the process did not exit within 30 s after quitting its client");
    assert.deepEqual(result, { code: 0, signal: null });
    assert.match(out, /done/);
    await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
  });
}

test("closing the Client that lock objects over one Redis client share leaves the others usable", async () => {
  const start = await clientCount(admin);
  const redis = new IORedis({ port: server.port });
  const a = new Mutex(redis, "conn:shared");
  const b = new Mutex(redis, "conn:shared");
  assert.equal(a.client, b.client, "one Client, so one pool of wait connections");
  await waitedRound(redis, "conn:shared", a);
  await a.client.close();
  await waitedRound(redis, "conn:shared", b);
  await redis.quit();
  await waitFor(async () => (await clientCount(admin)) === start, { message: "the count back to where it started" });
});

test("an error reply to a wait keeps its connection for the next wait", async () => {
  const redis = new IORedis({ port: server.port });
  const client = new Client(redis);
  await redis.set("conn:string", "not a lock");
  await assert.rejects(client.lock("conn:string", "j", { wait: 1000 }), { name: "CommandError", code: "WRONGTYPE" });
  assert.equal(client.waitConnections, 1, "kept, idle");
  assert.equal(typeof (await client.lock("conn:free", "j", { wait: 1000 })), "number");
  assert.equal(client.waitConnections, 1, "and reused");
  await client.unlock("conn:free", "j");
  await redis.del("conn:string");
  await client.close();
  assert.equal(client.waitConnections, 0);
  await redis.quit();
});
