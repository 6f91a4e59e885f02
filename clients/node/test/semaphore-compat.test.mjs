// What a user of redis-semaphore relies on when swapping its import for this package's:
// the same calls and options mean the same, and what has no meaning here is refused
// with an error that says what to use instead.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";
import {
  Mutex, Semaphore, LockLostError, LockNotAcquiredError, defaultOnLockLost,
} from "../dist/esm/index.js";
import { startServer, waitFor, calls, assertNoClientsLeft } from "./helpers.mjs";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
let server, redis;
before(async () => {
  server = await startServer();
  redis = new IORedis({ port: server.port });
});
after(async () => {
  await redis.quit();
  await assertNoClientsLeft(server.port);
  server?.stop();
});

const waiters = (key) => redis.call("UNIQUE.WAITERS", key);
const lockedBy = (key) => redis.call("UNIQUE.LOCKEDBY", key);

test("acquire(signal) and tryAcquire(signal) take an AbortSignal as their argument", async () => {
  const holder = new Mutex(redis, "compat:abort");
  await holder.acquire();
  for (const call of ["acquire", "tryAcquire"]) {
    const waiter = new Mutex(redis, "compat:abort", { acquireTimeout: 60_000 });
    const controller = new AbortController();
    const waiting = waiter[call](controller.signal);
    await waitFor(async () => (await waiters("compat:abort")) === 1, { message: `the ${call} waiter` });
    controller.abort(new Error(`${call} aborted`));
    await assert.rejects(waiting, new RegExp(`${call} aborted`));
    await waitFor(async () => (await waiters("compat:abort")) === 0, { message: "the server to forget it" });
    assert.equal(waiter.isAcquired, false);
    await assert.rejects(waiter[call](AbortSignal.abort()), { name: "AbortError" });
  }
  await holder.release();
  assert.deepEqual(await lockedBy("compat:abort"), []);
  await assert.rejects(new Mutex(redis, "compat:abort").acquire("soon"), TypeError);
});

test("tryAcquire() waits up to acquireTimeout: true when the lock frees meanwhile, false when it stays held", async () => {
  const holder = new Mutex(redis, "compat:try");
  await holder.acquire();
  const waiter = new Mutex(redis, "compat:try", { acquireTimeout: 60_000 });
  const trying = waiter.tryAcquire();
  await waitFor(async () => (await waiters("compat:try")) === 1, { message: "tryAcquire waiting" });
  await holder.release();
  assert.equal(await trying, true);
  assert.deepEqual(await lockedBy("compat:try"), [waiter.identifier]);
  const other = new Mutex(redis, "compat:try", { acquireTimeout: 100 });
  assert.equal(await other.tryAcquire(), false);
  await assert.rejects(other.acquire(), LockNotAcquiredError);
  await waiter.release();
});

test("acquireAttemptsLimit: 1 and acquireTimeout: 0 make a single attempt; other counts bound the wait", async () => {
  const holder = new Mutex(redis, "compat:once");
  await holder.acquire();
  for (const options of [{ acquireAttemptsLimit: 1, acquireTimeout: 60_000 }, { acquireTimeout: 0 }]) {
    const before = await calls(redis, "unique.lock");
    assert.equal(await new Mutex(redis, "compat:once", options).tryAcquire(), false);
    assert.equal((await calls(redis, "unique.lock")) - before, 1, "one UNIQUE.LOCK, no WAIT");
  }
  await holder.release();
  const once = new Mutex(redis, "compat:once", { acquireAttemptsLimit: 1 });
  assert.equal(await once.tryAcquire(), true, "a free lock is taken");
  await once.release();
  // n attempts retryInterval apart: a grant could come up to (n - 1) * retryInterval ms later.
  assert.equal(new Mutex(redis, "compat:once", { acquireAttemptsLimit: 3 }).acquireTimeout, 20);
  assert.equal(new Mutex(redis, "compat:once", { acquireAttemptsLimit: 3, retryInterval: 100 }).acquireTimeout, 200);
  assert.equal(new Mutex(redis, "compat:once", { acquireAttemptsLimit: 1000, retryInterval: 100, acquireTimeout: 500 }).acquireTimeout, 500);
  for (const acquireAttemptsLimit of [0, 1.5, -1]) {
    assert.throws(() => new Mutex(redis, "compat:once", { acquireAttemptsLimit }), (e) => e instanceof RangeError && /acquireAttemptsLimit/.test(e.message));
  }
  assert.equal(new Mutex(redis, "compat:once", { acquireAttemptsLimit: Infinity }).acquireTimeout, 10_000); // redis-semaphore's default
});

test("retryInterval is accepted (nothing polls); unknown options are refused, saying what to do", () => {
  assert.equal(new Mutex(redis, "compat:opt", { retryInterval: 100 }).acquireTimeout, 10_000);
  assert.throws(() => new Mutex(redis, "compat:opt", { retryInterval: -1 }), RangeError);
  assert.throws(() => new Semaphore(redis, "compat:opt", 2, { lockTimout: 100 }), (e) => e instanceof TypeError && /unknown lock option lockTimout/.test(e.message));
  assert.throws(() => new Mutex(redis, "compat:opt", { acquireTimeout: -1 }), RangeError);
});

test("refreshInterval: 0 turns renewals off: the lease then ends by itself", async () => {
  // 1.5 s: still held when the next line reads it, however late the loaded machine runs it.
  const m = new Mutex(redis, "compat:norefresh", { lockTimeout: 1500, refreshInterval: 0 });
  await m.acquire();
  assert.ok((await m.client.holders("compat:norefresh"))[0].expiresAt > 0, "held with a lease");
  await waitFor(async () => (await lockedBy("compat:norefresh")).length === 0, { message: "the lease to end" });
  assert.throws(() => new Mutex(redis, "compat:norefresh", { refreshInterval: -1 }), RangeError);
});

test("stopRefresh() stops the renewals of a held lock", async () => {
  // Renewed every 500 ms: kept through a stall of the loaded machine of a second, where a
  // lease of 300 ms ended after 200 ms (and no renewal would ever come to be seen).
  const m = new Mutex(redis, "compat:stop", { lockTimeout: 1500 });
  await m.acquire();
  // renewed while refreshing...
  const first = (await m.client.holders("compat:stop"))[0].expiresAt;
  await waitFor(async () => (await m.client.holders("compat:stop"))[0]?.expiresAt > first, { message: "a renewal" });
  // ...and no more once stopped
  m.stopRefresh();
  await waitFor(async () => (await lockedBy("compat:stop")).length === 0, { message: "the lease to end" });
});

test("identifierSuffix follows a random UUID, as redis-semaphore's", async () => {
  const m = new Semaphore(redis, "compat:suffix", 2, { identifierSuffix: "worker-7" });
  assert.match(m.identifier, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-worker-7$/);
  assert.notEqual(m.identifier, new Mutex(redis, "compat:suffix", { identifierSuffix: "worker-7" }).identifier);
  await m.acquire();
  assert.deepEqual(await lockedBy("compat:suffix"), [m.identifier]);
  await m.release();
  assert.throws(() => new Mutex(redis, "k", { identifier: "a", identifierSuffix: "b" }), TypeError);
  assert.throws(() => new Mutex(redis, "k", { identifierSuffix: "" }), TypeError);
});

test("acquiredExternally takes over a hold by its identifier, with its fencing token", async () => {
  // a scheduler takes the lock and hands the job its identifier
  const scheduler = new Mutex(redis, "compat:ext", { identifier: "job-42", lockTimeout: 60_000 });
  await scheduler.acquire();
  scheduler.stopRefresh();
  // 1.5 s, renewed every 500 ms: kept through a stall of the loaded machine of a second.
  const handler = new Mutex(redis, "compat:ext", { identifier: "job-42", acquiredExternally: true, lockTimeout: 1500 });
  await handler.acquire();
  assert.equal(handler.token, scheduler.token, "the same hold");
  // the handler renews it now, with its own 1.5 s lease
  const [taken] = await handler.client.holders("compat:ext");
  assert.ok(taken.ttl <= 1500, "the handler's lease replaced the scheduler's");
  await waitFor(async () => (await handler.client.holders("compat:ext"))[0]?.expiresAt > taken.expiresAt, { message: "a renewal by the handler" });
  assert.deepEqual(await lockedBy("compat:ext"), ["job-42"]);
  await handler.release();
  assert.deepEqual(await lockedBy("compat:ext"), []);

  // nothing held under that identifier: no new hold is taken
  const late = new Mutex(redis, "compat:ext", { identifier: "job-42", acquiredExternally: true });
  assert.equal(await late.tryAcquire(), false);
  await assert.rejects(late.acquire(), LockNotAcquiredError);
  assert.deepEqual(await lockedBy("compat:ext"), []);

  // release() without acquire() releases the external hold, as redis-semaphore's; and the deprecated spelling
  await redis.call("UNIQUE.LOCK", "compat:ext", "job-43", "TTL", "60000");
  await new Mutex(redis, "compat:ext", { externallyAcquiredIdentifier: "job-43" }).release();
  assert.deepEqual(await lockedBy("compat:ext"), []);

  assert.throws(() => new Mutex(redis, "k", { acquiredExternally: true }), /identifier/);
  assert.throws(() => new Mutex(redis, "k", { identifier: "a", externallyAcquiredIdentifier: "a" }), TypeError);
});

test("onLockLost is called with this set to the lock object", async () => {
  let self, error;
  const m = new Mutex(redis, "compat:lost", {
    // 3 s: the UNLOCK comes while it is held however late the loaded machine runs it.
    lockTimeout: 3000,
    onLockLost(e) { self = this; error = e; },
  });
  await m.acquire();
  await redis.call("UNIQUE.UNLOCK", "compat:lost", m.identifier);
  await waitFor(() => error, { message: "onLockLost" });
  assert.equal(self, m);
  assert.ok(error instanceof LockLostError);
  assert.equal(m.isAcquired, false);
  assert.throws(() => defaultOnLockLost(error), LockLostError);
});

// The default onLockLost, and an onLockLost that throws, surface as an unhandled promise
// rejection (as redis-semaphore's): Node then ends the process with the error.
const CHILD = `
import IORedis from "ioredis";
import { Mutex } from ${JSON.stringify(new URL("../dist/esm/index.js", import.meta.url).href)};
const [mode, port, key] = process.argv.slice(1);
const redis = new IORedis({ port: Number(port) });
const options = { lockTimeout: 300 };
if (mode === "throws") options.onLockLost = function (e) { throw new Error("handler failed for " + this.key); };
const m = new Mutex(redis, key, options);
await m.acquire();
await redis.call("UNIQUE.UNLOCK", key, m.identifier);
console.log("removed");
setTimeout(() => { console.log("still running"); process.exit(0); }, 30000);
`;

for (const [mode, expected] of [["default", /LockLostError/], ["throws", /handler failed for compat:crash:throws/]]) {
  test(`onLockLost ${mode === "default" ? "by default throws the error" : "that throws"}: an unhandled rejection ends the process`, async () => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", CHILD, mode, String(server.port), `compat:crash:${mode}`], {
      cwd: PACKAGE, stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const code = await new Promise((resolve) => child.on("exit", resolve));
    assert.match(out, /removed/);
    assert.doesNotMatch(out, /still running/);
    assert.equal(code, 1);
    assert.match(err, expected);
  });
}

test("the type declarations: stopRefresh() public, acquire(signal), onLockLost's this", () => {
  const dir = mkdtempSync(join(tmpdir(), "redis-unique-types-"));
  try {
    const file = join(dir, "usage.ts");
    writeFileSync(file, `
import { Mutex, Semaphore, type LockObjectOptions } from ${JSON.stringify(join(PACKAGE, "dist/esm/index.js"))};
declare const redis: any;
const options: LockObjectOptions = {
  identifierSuffix: "w", refreshInterval: 0, acquireAttemptsLimit: 1,
  onLockLost(error) { this.stopRefresh(); console.log(this.key, error.message); },
};
const m = new Mutex(redis, "k", options);
m.stopRefresh();
const s = new Semaphore(redis, "k", 3, { identifier: "j", acquiredExternally: true });
export async function use(signal: AbortSignal): Promise<boolean> {
  await m.acquire(signal);
  await m.acquire({ signal });
  return s.tryAcquire(signal);
}
`);
    execFileSync(process.execPath, [join(PACKAGE, "node_modules/typescript/bin/tsc"), "--noEmit", "--strict", "--skipLibCheck",
      "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node",
      "--typeRoots", join(PACKAGE, "node_modules/@types"), file], { stdio: "pipe" });
  } catch (e) {
    assert.fail(`tsc: ${e.stdout ?? ""}${e.stderr ?? ""}${e.message}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
