// The fenced unlock (`unlock(key, jid, token)`, `unlockAll(keys, jid, tokens)`) against a real
// server: an old token frees nothing of a newer hold of the same jid; a lock object releases by
// its own token and gives up a hold a late renewal took by that hold's token; a MultiLock whose
// renewal is refused releases the keys it still holds at once.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { Client, Mutex, MultiLock, LockLostError } from "../dist/esm/index.js";
import { startServer, waitFor, assertNoClientsLeft } from "./helpers.mjs";

let server, redis, client;
before(async () => {
  server = await startServer();
  redis = new IORedis({ port: server.port });
  client = new Client(redis);
  await redis.config("SET", "slowlog-log-slower-than", "0");
  await redis.config("SET", "slowlog-max-len", "1024");
});
after(async () => { await client.close(); await redis.quit(); await assertNoClientsLeft(server.port); server?.stop(); });

/** The UNLOCK and UNLOCKALL calls naming `key` the server logged (every command: SLOWLOG at 0 µs). */
async function unlocksSent(key) {
  const entries = await redis.slowlog("GET", 1024);
  return entries.reverse().map((e) => e[3]).filter((argv) => /^UNIQUE\.UNLOCK/i.test(argv[0]) && argv.includes(key));
}

test("an old token frees nothing of the same jid's new hold", async () => {
  const old = await client.lock("fenced:k", "job-4", { ttl: 60_000 });
  assert.equal(await client.unlock("fenced:k", "job-4"), true);
  const fresh = await client.lock("fenced:k", "job-4", { ttl: 60_000 }); // the same jid again: a retried job
  assert.ok(fresh > old);
  assert.equal(await client.unlock("fenced:k", "job-4", old), false);
  assert.deepEqual((await client.holders("fenced:k")).map((h) => h.token), [fresh]);
  assert.deepEqual(await client.pipeline().unlock("fenced:k", "job-4", old).unlock("fenced:k", "job-4", fresh).exec(), [false, true]);
  for (const bad of [0, -1, 1.5, "1", Number.MAX_SAFE_INTEGER + 2]) {
    assert.throws(() => client.unlock("fenced:k", "job-4", bad), TypeError, String(bad));
  }
});

test("unlockAll releases each key whose hold has its token", async () => {
  const keys = ["{fenced}:a", "{fenced}:b"];
  const first = await client.lockAll(keys, "j", { ttl: 60_000 });
  assert.equal(await client.unlock("{fenced}:b", "j"), true);
  const b = await client.lock("{fenced}:b", "j", { ttl: 60_000 });
  assert.equal(await client.unlockAll(keys, "j", first), 1); // a released, b's newer hold kept
  assert.deepEqual((await client.holders("{fenced}:b")).map((h) => h.token), [b]);
  assert.throws(() => client.unlockAll(keys, "j", [b]), TypeError);
  assert.equal(await client.unlockAll(["{fenced}:b"], "j", [b]), 1);
});

test("a Mutex releases by its own token", async () => {
  await redis.slowlog("RESET");
  const mutex = new Mutex(client, "fenced:own", { lockTimeout: 30_000 });
  await mutex.acquire();
  const token = mutex.token;
  await mutex.release();
  assert.deepEqual(await unlocksSent("fenced:own"), [["UNIQUE.UNLOCK", "fenced:own", mutex.identifier, "TOKEN", String(token)]]);
});

test("a late renewal gives up the hold it took by that hold's token", async () => {
  await redis.slowlog("RESET");
  const lost = [];
  const mutex = new Mutex(client, "fenced:late", { lockTimeout: 1500, onLockLost: (e) => lost.push(e) });
  await mutex.acquire();
  const token = mutex.token;
  await redis.del("fenced:late"); // nobody holds it: the next renewal is a new grant
  await waitFor(() => lost.length === 1, { timeout: 30_000, message: "the loss" });
  await waitFor(async () => (await unlocksSent("fenced:late")).length === 1, { timeout: 30_000, message: "the new hold given up" });
  const [[name, key, jid, word, given]] = await unlocksSent("fenced:late");
  assert.deepEqual([name, key, jid, word], ["UNIQUE.UNLOCK", "fenced:late", mutex.identifier, "TOKEN"]);
  assert.ok(Number(given) > token);
  assert.deepEqual(await client.lockedBy("fenced:late"), []);
});

test("a refused renewal of several keys releases the keys still held at once, by their tokens", async () => {
  await redis.slowlog("RESET");
  const lost = [];
  const hold = new MultiLock(client, ["{fm}:a", "{fm}:b"], { lockTimeout: 1500, onLockLost: (e) => lost.push(e) });
  await hold.acquire();
  const tokens = hold.tokens;
  assert.equal(await client.unlock("{fm}:a", hold.identifier), true); // one key's hold ends
  await waitFor(() => lost.length === 1, { timeout: 30_000, message: "the refusal" });
  assert.ok(lost[0] instanceof LockLostError);
  // Nothing released by the user yet: b is free long before its lease would have ended.
  await waitFor(async () => (await client.lockedBy("{fm}:b")).length === 0, { timeout: 30_000, message: "b released" });
  assert.deepEqual(await unlocksSent("{fm}:b"),
    [["UNIQUE.UNLOCKALL", "2", "{fm}:a", "{fm}:b", hold.identifier, "TOKEN", ...tokens.map(String)]]);
  await hold.release();
});
