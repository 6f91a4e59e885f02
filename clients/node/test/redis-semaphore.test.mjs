// Written as a user of redis-semaphore 5.7 writes them, with its options and its error
// classes, the import swapped to this package: its TimeoutOptions (retryInterval in every
// case, as its own tests pass it), `defaultTimeoutOptions`, TimeoutError and LostLockError
// caught by class and matched by the start of their messages (`Acquire mutex <key> timeout`,
// `Acquire semaphore <key> timeout`, `Lost mutex for key <key>`), our detail after them.
// Keys are the key itself here (redis-semaphore's are `mutex:<key>`, `semaphore:<key>`).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import {
  Mutex, Semaphore, MultiLock, TimeoutError, LostLockError, LockNotAcquiredError, LockLostError, defaultTimeoutOptions,
} from "../dist/esm/index.js";
import { startServer, waitFor, calls, assertNoClientsLeft } from "./helpers.mjs";

let server, client;
before(async () => {
  server = await startServer();
  client = new IORedis({ port: server.port });
});
after(async () => {
  await client.quit();
  await assertNoClientsLeft(server.port);
  server?.stop();
});

// redis-semaphore's own test options. The lease is longer than theirs (300 ms) so that a
// renewal every 80 ms keeps it on a loaded machine; the rest as they are.
const timeoutOptions = {
  lockTimeout: 3000,
  acquireTimeout: 100,
  refreshInterval: 80,
  retryInterval: 10,
};

test("defaultTimeoutOptions are redis-semaphore's", () => {
  assert.deepEqual({ ...defaultTimeoutOptions },
    { lockTimeout: 10000, acquireTimeout: 10000, acquireAttemptsLimit: Number.POSITIVE_INFINITY, retryInterval: 10 });
  const mutex = new Mutex(client, "rs:defaults", defaultTimeoutOptions);
  assert.equal(mutex.acquireTimeout, 10000);
  assert.equal(mutex.lockTimeout, 10000);
});

test("Mutex: should reject after timeout (TimeoutError, `Acquire mutex <key> timeout`, then who holds it)", async () => {
  const mutex1 = new Mutex(client, "key", timeoutOptions);
  const mutex2 = new Mutex(client, "key", timeoutOptions);
  await mutex1.acquire();
  await assert.rejects(mutex2.acquire(), (err) => {
    assert.ok(err instanceof TimeoutError);
    assert.ok(err instanceof LockNotAcquiredError, "still this package's error");
    assert.equal(err.name, "TimeoutError");
    assert.ok(err.message.startsWith("Acquire mutex key timeout"), err.message);
    assert.ok(err.message.includes(`held by ${mutex1.identifier}`), err.message);
    return true;
  });
  await mutex1.release();
  assert.deepEqual(await client.call("UNIQUE.LOCKEDBY", "key"), []);
});

test("Mutex: should return false for tryAcquire after timeout, true when free", async () => {
  const mutex1 = new Mutex(client, "key2", timeoutOptions);
  const mutex2 = new Mutex(client, "key2", timeoutOptions);
  await mutex1.acquire();
  assert.equal(await mutex2.tryAcquire(), false);
  await mutex1.release();
  assert.equal(await mutex2.tryAcquire(), true);
  await mutex2.release();
});

test("Semaphore: should reject after timeout (`Acquire semaphore <key> timeout`)", async () => {
  const semaphore1 = new Semaphore(client, "skey", 2, timeoutOptions);
  const semaphore2 = new Semaphore(client, "skey", 2, timeoutOptions);
  const semaphore3 = new Semaphore(client, "skey", 2, timeoutOptions);
  await semaphore1.acquire();
  await semaphore2.acquire();
  await assert.rejects(semaphore3.acquire(), (err) =>
    err instanceof TimeoutError && err.message.startsWith("Acquire semaphore skey timeout") &&
    err.message.includes(semaphore1.identifier) && err.message.includes(semaphore2.identifier));
  await semaphore1.release();
  await semaphore3.acquire();
  await semaphore2.release();
  await semaphore3.release();
});

test("retryInterval only tunes polling: the waiter is served by the release itself, with no command sent meanwhile", async () => {
  const holder = new Mutex(client, "rs:served", timeoutOptions);
  await holder.acquire();
  const waiter = new Mutex(client, "rs:served", { ...timeoutOptions, acquireTimeout: 60_000, retryInterval: 1 });
  const before = await calls(client, "unique.lock");
  const waiting = waiter.acquire();
  await waitFor(async () => (await client.call("UNIQUE.WAITERS", "rs:served")) === 1, { message: "the waiter" });
  await holder.release();
  await waiting;
  // The waiter's one waiting LOCK (or a first try and its WAIT), never one per retryInterval.
  assert.ok((await calls(client, "unique.lock")) - before <= 2);
  await waiter.release();
});

test("acquireAttemptsLimit with retryInterval bounds the wait as redis-semaphore's attempts do", async () => {
  const holder = new Mutex(client, "rs:attempts", timeoutOptions);
  await holder.acquire();
  const limited = new Mutex(client, "rs:attempts", { ...timeoutOptions, acquireTimeout: 60_000, acquireAttemptsLimit: 3, retryInterval: 20 });
  assert.equal(limited.acquireTimeout, 40);
  await assert.rejects(limited.acquire(), (err) => err instanceof TimeoutError && err.message.startsWith("Acquire mutex rs:attempts timeout"));
  await holder.release();
});

test("MultiLock takes redis-semaphore's timing options too, and times out as a multilock", async () => {
  const one = new MultiLock(client, ["{rs}:a", "{rs}:b"], timeoutOptions);
  const two = new MultiLock(client, ["{rs}:a", "{rs}:b"], timeoutOptions);
  await one.acquire();
  await assert.rejects(two.acquire(), (err) => err instanceof TimeoutError && err.message.startsWith("Acquire multilock {rs}:a, {rs}:b timeout"));
  await one.release();
});

test("Mutex: onLockLost gets a LostLockError (`Lost mutex for key <key>`, then why) when another client deletes the lock", async () => {
  const lost = [];
  const mutex = new Mutex(client, "rs:lost", {
    ...timeoutOptions,
    onLockLost(err) {
      lost.push([this, err]);
    },
  });
  await mutex.acquire();
  assert.equal(mutex.isAcquired, true);
  await client.del("rs:lost"); // as if expired
  await waitFor(() => lost.length === 1, { message: "onLockLost" });
  const [self, err] = lost[0];
  assert.equal(self, mutex);
  assert.equal(mutex.isAcquired, false);
  assert.ok(err instanceof LostLockError);
  assert.equal(LostLockError, LockLostError, "one class, both names");
  assert.ok(err.message.startsWith("Lost mutex for key rs:lost"), err.message);
  // The renewal that took the key again gave that hold up, by its token.
  await waitFor(async () => (await client.call("UNIQUE.LOCKEDBY", "rs:lost")).length === 0, { message: "the new hold given up" });
});

test("Semaphore: onLockLost's message starts as redis-semaphore's", async () => {
  const lost = [];
  const semaphore = new Semaphore(client, "rs:slost", 3, { ...timeoutOptions, onLockLost: (err) => lost.push(err) });
  await semaphore.acquire();
  await client.del("rs:slost");
  await waitFor(() => lost.length === 1, { message: "onLockLost" });
  assert.ok(lost[0] instanceof LostLockError && lost[0].message.startsWith("Lost semaphore for key rs:slost"), lost[0].message);
});
