import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { createClient } from "redis";
import {
  Client, Mutex, Semaphore, AlreadyAcquiredError, LockLostError, LockNotAcquiredError,
} from "../dist/esm/index.js";
import { startServer, waitFor, assertNoClientsLeft } from "./helpers.mjs";

let server, redis, client;
before(async () => {
  server = await startServer();
  redis = new IORedis({ port: server.port });
  client = new Client(redis);
});
after(async () => { await client.close(); await redis.quit(); await assertNoClientsLeft(server.port); server?.stop(); });

test("a Mutex holds alone, with a fencing token, and renews its lease", async () => {
  const a = new Mutex(client, "m:1", { lockTimeout: 300 });
  const b = new Mutex(client, "m:1", { lockTimeout: 300, acquireTimeout: 50 });
  await a.acquire();
  assert.equal(typeof a.token, "number");
  assert.equal(a.isAcquired, true);
  assert.equal(await b.tryAcquire(), false);
  await assert.rejects(b.acquire(), LockNotAcquiredError);
  // held across several lease lengths: the timer renews it
  const first = (await client.holders("m:1"))[0].expiresAt;
  await waitFor(async () => (await client.holders("m:1"))[0]?.expiresAt > first + 300, { message: "a renewal" });
  assert.deepEqual(await client.lockedBy("m:1"), [a.identifier]);
  await a.release();
  assert.equal(a.token, null);
  assert.equal(await b.tryAcquire(), true);
  assert.ok(b.token > 0);
  await b[Symbol.asyncDispose]();
  assert.deepEqual(await client.lockedBy("m:1"), []);
});

test("a second acquire on a held lock object throws instead of starting a second renewal", async () => {
  const m = new Mutex(client, "m:twice");
  await m.acquire();
  await assert.rejects(m.acquire(), AlreadyAcquiredError);
  await assert.rejects(m.tryAcquire(), AlreadyAcquiredError);
  await m.release();
});

test("a Semaphore admits its limit", async () => {
  const sems = Array.from({ length: 4 }, () => new Semaphore(client, "s:1", 3, { acquireTimeout: 50 }));
  const got = [];
  for (const s of sems) got.push(await s.tryAcquire());
  assert.deepEqual(got, [true, true, true, false]);
  await sems[0].release();
  assert.equal(await sems[3].tryAcquire(), true);
  await Promise.all(sems.map((s) => s.release()));
  assert.throws(() => new Semaphore(client, "s:2", 0), RangeError);
  assert.throws(() => new Semaphore(client, "s:2", 1.5), RangeError);
});

test("acquire waits natively, first come first served, and takes the lock when released", async () => {
  const holder = new Mutex(client, "m:wait");
  await holder.acquire();
  const waiter = new Mutex(client, "m:wait", { acquireTimeout: 10_000 });
  const acquired = waiter.acquire();
  await waitFor(async () => (await client.waiters("m:wait")) === 1, { message: "the waiter" });
  await holder.release();
  await acquired;
  assert.equal(waiter.isAcquired, true);
  await waiter.release();
});

test("an AbortSignal ends a wait at once, and the server forgets the waiter", async () => {
  const holder = new Mutex(client, "m:abort");
  await holder.acquire();
  const waiter = new Mutex(client, "m:abort", { acquireTimeout: 60_000 });
  const controller = new AbortController();
  const acquired = waiter.acquire({ signal: controller.signal });
  await waitFor(async () => (await client.waiters("m:abort")) === 1, { message: "the waiter" });
  const t = Date.now();
  controller.abort(new Error("stop waiting"));
  await assert.rejects(acquired, /stop waiting/);
  assert.ok(Date.now() - t < 5000);
  await waitFor(async () => (await client.waiters("m:abort")) === 0, { message: "the server to forget it" });
  assert.equal(waiter.isAcquired, false);
  await holder.release();
  assert.deepEqual(await client.lockedBy("m:abort"), []);
  await assert.rejects(waiter.acquire({ signal: AbortSignal.abort() }));
});

test("a lost lease is detected and reported to onLockLost", async () => {
  const lost = [];
  // A lease of 3 s: the UNLOCK comes while it is held however late the loaded machine runs it
  // (a lease that ended first would be taken again by a late renewal, and given up after).
  const m = new Mutex(client, "m:lost", { lockTimeout: 3000, onLockLost: (e) => lost.push(e) });
  await m.acquire();
  // another client removes it (an operator, a REAP): the next renewal finds it gone
  await redis.call("UNIQUE.UNLOCK", "m:lost", m.identifier);
  await waitFor(() => lost.length === 1, { message: "onLockLost" });
  assert.ok(lost[0] instanceof LockLostError);
  assert.equal(m.isAcquired, false);
  assert.deepEqual(await client.lockedBy("m:lost"), [], "the lost hold is not silently taken again");
});

test("the locks work over node-redis too", async () => {
  const nr = createClient({ socket: { port: server.port, host: "127.0.0.1" } });
  await nr.connect();
  try {
    const a = new Mutex(nr, "m:nr");
    const b = new Mutex(nr, "m:nr", { acquireTimeout: 5000 });
    await a.acquire();
    const waiting = b.acquire();
    await waitFor(async () => (await client.waiters("m:nr")) === 1, { message: "the waiter" });
    await a.release();
    await waiting;
    assert.equal(b.isAcquired, true);
    await b.release();
    await b.client.close();
  } finally {
    await nr.close();
  }
});

test("options are checked when the lock object is made", () => {
  assert.throws(() => new Mutex(client, "m:x", { lockTimeout: 0 }), RangeError);
  assert.throws(() => new Mutex(client, "m:x", { lockTimeout: 1.5 }), RangeError);
  assert.throws(() => new Mutex(client, "m:x", { type: "no spaces" }), RangeError);
  assert.throws(() => new Mutex(client, "", {}), TypeError);
});
