// Fair sharing and shared/exclusive holds on a real server: GROUPLIMIT beside LIMIT, a freed
// slot served to the group holding the fewest, WAITERS GROUPS, holders' group and mode, and
// the RWLock (readers share, a writer holds alone, a queued writer blocks new readers, the
// readers behind it are served together, renewals keep the mode), over both Redis clients.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { createClient } from "redis";
import { Client, RWLock } from "../dist/esm/index.js";
import { startServer, waitFor, assertNoClientsLeft } from "./helpers.mjs";

let server;
before(async () => { server = await startServer(); });
after(async () => { await assertNoClientsLeft(server.port); server?.stop(); });

const flavours = {
  ioredis: async (port) => {
    const r = new IORedis({ port });
    return { redis: r, close: () => r.quit() };
  },
  "node-redis": async (port) => {
    const r = createClient({ socket: { port, host: "127.0.0.1" } });
    await r.connect();
    return { redis: r, close: () => r.close?.() ?? r.quit() };
  },
};

for (const [name, connect] of Object.entries(flavours)) {
  describe(`over ${name}`, () => {
    let conn, client;
    before(async () => {
      conn = await connect(server.port);
      client = new Client(conn.redis);
    });
    after(async () => { await client.close(); await conn.close(); });

    const key = (s) => `${name}:${s}`;
    const groups = (k) => client.waiters(k, { groups: true });

    test("GROUPLIMIT beside LIMIT; a waiter refused by its own group's limit never blocks another group", async () => {
      const k = key("gl");
      const a = { limit: 3, group: "a", groupLimit: 2 };
      const b = { limit: 3, group: "b", groupLimit: 2 };
      assert.equal(typeof (await client.lock(k, "a1", a)), "number");
      assert.equal(typeof (await client.lock(k, "a2", a)), "number");
      assert.equal(await client.lock(k, "a3", a), null, "a's own limit");
      assert.equal(typeof (await client.lock(k, "b1", b)), "number");
      assert.equal(await client.lock(k, "b2", b), null, "the key's limit");
      const a3 = client.lock(k, "a3", { ...a, wait: 30_000 });
      const b2 = client.lock(k, "b2", { ...b, wait: 30_000 });
      await waitFor(async () => (await client.waiters(k)) === 2, { message: "two waiters" });
      assert.deepEqual(await groups(k), [
        { group: "a", waiting: 1, holding: 2 },
        { group: "b", waiting: 1, holding: 1 },
      ]);
      await client.unlock(k, "b1");
      assert.equal(typeof (await b2), "number", "b2 served past a3, which its group's limit holds back");
      assert.deepEqual(await groups(k), [
        { group: "a", waiting: 1, holding: 2 },
        { group: "b", waiting: 0, holding: 1 },
      ]);
      await client.unlock(k, "a1");
      assert.equal(typeof (await a3), "number");
      const holders = await client.holders(k);
      assert.deepEqual(holders.map((h) => [h.jid, h.group, h.mode]), [["a2", "a", null], ["b2", "b", null], ["a3", "a", null]]);
      assert.equal(typeof (await client.lock(k, "a2", { ttl: 60_000 })), "number", "a renewal keeps its group");
      assert.equal((await client.holders(k)).find((h) => h.jid === "a2").group, "a");
      assert.deepEqual(await client.waiters(key("none"), { groups: true }), []);
    });

    test("a freed slot goes to the waiting group that holds the fewest, ahead of an earlier waiter of a busier group", async () => {
      const k = key("fair");
      const x = { limit: 2, group: "x" };
      await client.lock(k, "x1", x);
      await client.lock(k, "x2", x);
      const x3 = client.lock(k, "x3", { ...x, wait: 30_000 });
      await waitFor(async () => (await client.waiters(k)) === 1, { message: "x3 waiting" });
      const y1 = client.lock(k, "y1", { limit: 2, group: "y", wait: 30_000 });
      await waitFor(async () => (await client.waiters(k)) === 2, { message: "y1 waiting" });
      await client.unlock(k, "x1");
      assert.equal(typeof (await y1), "number", "y holds none: it goes first");
      assert.deepEqual(await groups(k), [
        { group: "x", waiting: 1, holding: 1 },
        { group: "y", waiting: 0, holding: 1 },
      ]);
      await client.unlock(k, "x2");
      assert.equal(typeof (await x3), "number");
      assert.deepEqual(await client.lockedBy(k), ["y1", "x3"]);
    });

    test("holders and waiters without a group come first, as group null", async () => {
      const k = key("nil");
      await client.lock(k, "plain");
      await client.lock(k, "g1", { limit: 2, group: "g" });
      const waiting = client.lock(k, "late", { wait: 30_000, limit: 2 });
      await waitFor(async () => (await client.waiters(k)) === 1, { message: "the waiter" });
      assert.deepEqual(await groups(k), [
        { group: null, waiting: 1, holding: 1 },
        { group: "g", waiting: 0, holding: 1 },
      ]);
      await client.unlock(k, "plain");
      assert.equal(typeof (await waiting), "number");
    });

    test("RWLock: readers share, a writer waits for them and holds alone, readers after it queue behind it", async () => {
      const k = key("rw");
      const r1 = new RWLock(client, k, { acquireTimeout: 30_000 });
      const r2 = new RWLock(client, k, { acquireTimeout: 30_000 });
      const w = new RWLock(client, k, { acquireTimeout: 30_000 });
      const late = [new RWLock(client, k, { acquireTimeout: 30_000 }), new RWLock(client, k, { acquireTimeout: 30_000 })];
      await r1.acquireRead();
      await r2.acquireRead();
      const writing = w.acquireWrite();
      await waitFor(async () => (await client.waiters(k)) === 1, { message: "the writer waiting" });
      const probe = new RWLock(client, k, { acquireTimeout: 0 });
      assert.equal(await probe.tryAcquireRead(), false, "a reader after a waiting writer does not jump it");
      const reading = late.map((r) => r.acquireRead());
      await waitFor(async () => (await client.waiters(k)) === 3, { message: "two readers behind the writer" });
      await r1.releaseRead();
      assert.equal(w.isAcquired, false, "one reader still holds");
      await r2.releaseRead();
      await writing;
      assert.equal(w.mode, "write");
      assert.deepEqual((await client.holders(k)).map((h) => [h.jid, h.mode]), [[w.identifier, "exclusive"]]);
      assert.equal(await probe.tryAcquireWrite(), false, "a writer holds alone");
      await w.releaseWrite();
      await Promise.all(reading);
      assert.deepEqual(late.map((r) => r.mode), ["read", "read"], "served together when the writer left");
      assert.deepEqual((await client.holders(k)).map((h) => h.mode), ["shared", "shared"]);
      await Promise.all(late.map((r) => r.releaseRead()));
    });

    test("RWLock: a reader limit; downgrade serves the waiting readers; an upgrade only for the sole holder, never waiting", async () => {
      const k = key("rw2");
      const readers = Array.from({ length: 3 }, () => new RWLock(client, k, { limit: 2, acquireTimeout: 0 }));
      assert.deepEqual([await readers[0].tryAcquireRead(), await readers[1].tryAcquireRead(), await readers[2].tryAcquireRead()],
        [true, true, false], "at most 2 readers");
      assert.equal(await readers[0].tryUpgrade(), false, "another reader holds");
      assert.equal(readers[0].mode, "read", "the read hold is kept");
      await readers[1].release();
      const token = readers[0].token;
      assert.equal(await readers[0].tryUpgrade(), true, "the sole holder");
      assert.equal(readers[0].token, token, "same fencing token");
      assert.deepEqual((await client.holders(k)).map((h) => h.mode), ["exclusive"]);
      const waiting = new RWLock(client, k, { limit: 2, acquireTimeout: 30_000 });
      const reading = waiting.acquireRead();
      await waitFor(async () => (await client.waiters(k)) === 1, { message: "a reader waiting for the writer" });
      await readers[0].downgrade();
      await reading;
      assert.equal(readers[0].token, token);
      assert.deepEqual((await client.holders(k)).map((h) => h.mode), ["shared", "shared"]);
      await readers[0].release();
      await waiting.release();
    });

    test("RWLock: renewals keep the mode and group", async () => {
      const k = key("rw3");
      // Renewed every third of the lease: 1200 ms is kept through a stall of the loaded
      // machine of 800 ms, where one of 300 ms ended after 200 ms.
      const w = new RWLock(client, k, { lockTimeout: 1200, group: "tenant" });
      await w.acquireWrite();
      const first = (await client.holders(k))[0];
      await waitFor(async () => w.renewals >= 2, { message: "two renewals" });
      const now = (await client.holders(k))[0];
      assert.ok(now.expiresAt > first.expiresAt);
      assert.deepEqual([now.token, now.mode, now.group], [first.token, "exclusive", "tenant"]);
      await w.release();
      assert.deepEqual(await client.lockedBy(k), []);
    });
  });
}
