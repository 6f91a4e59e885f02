// Several keys in one grant against a real server, over ioredis and node-redis: every key or
// none (judged on the server's holders), a rate spent only when the whole grant succeeds, a
// waiter served when the last key frees (holding nothing meanwhile, so opposite key orders do
// not deadlock), and MultiLock's renewal of several keys kept and lost (an UNLOCK of one key,
// a REAP of the owner).
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { createClient } from "redis";
import { Client, MultiLock, LockNotAcquiredError } from "../dist/esm/index.js";
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
    return { redis: r, close: () => r.quit() };
  },
};

for (const [name, connect] of Object.entries(flavours)) {
  describe(`lockAll over ${name}`, () => {
    let conn, client;
    const k = (s) => `{all:${name}}:${s}`;
    const holders = async (key) => (await client.lockedBy(key)).sort();
    before(async () => {
      conn = await connect(server.port);
      client = new Client(conn.redis);
    });
    after(async () => {
      await client.close();
      await conn.close();
    });

    test("every key or none: a full key refuses the grant and changes no other key", async () => {
      const [tenant, global] = [k("none:tenant"), k("none:global")];
      assert.ok(await client.lock(tenant, "busy", { ttl: 30_000 }));
      assert.equal(await client.lockAll([tenant, global], "j1", { limits: [1, 5], ttl: 30_000 }), null);
      assert.deepEqual(await holders(global), [], "the free key was not taken");
      assert.deepEqual(await holders(tenant), ["busy"]);
      await client.unlock(tenant, "busy");
      const tokens = await client.lockAll([tenant, global], "j1", { limits: [1, 5], ttl: 30_000 });
      assert.equal(tokens.length, 2);
      const held = await Promise.all([tenant, global].map((key) => client.holders(key)));
      assert.deepEqual(held.map((h) => h.map((x) => [x.jid, x.token])), [[["j1", tokens[0]]], [["j1", tokens[1]]]]);
      assert.ok(held.every(([h]) => h.ttl > 0 && h.ttl <= 30_000), "each key has the lease");
      assert.equal(await client.unlockAll([tenant, global], "j1"), 2);
      assert.deepEqual([await holders(tenant), await holders(global)], [[], []]);
      assert.equal(await client.unlockAll([tenant, global], "j1"), 0);
    });

    test("limits per key: 2 per tenant and 3 in all, decided together", async () => {
      const [a, b, global] = [k("lim:a"), k("lim:b"), k("lim:global")];
      const take = (tenant, jid) => client.lockAll([tenant, global], jid, { limits: [2, 3], ttl: 30_000 });
      assert.ok(await take(a, "a1"));
      assert.ok(await take(a, "a2"));
      assert.equal(await take(a, "a3"), null, "the tenant is full");
      assert.ok(await take(b, "b1"));
      assert.equal(await take(b, "b2"), null, "the global limit is full");
      assert.deepEqual(await holders(global), ["a1", "a2", "b1"]);
      assert.deepEqual(await holders(b), ["b1"], "b2 took no slot of its tenant");
      await client.unlockAll([a, global], "a1");
      assert.ok(await take(b, "b2"));
      for (const [t, j] of [[a, "a2"], [b, "b1"], [b, "b2"]]) await client.unlockAll([t, global], j);
    });

    test("a rate is spent only when every key grants", async () => {
      const [tenant, global] = [k("rate:tenant"), k("rate:global")];
      const rates = [undefined, { limit: 1, per: 60_000, burst: 2 }]; // 3 at once, then one a minute
      await client.lock(tenant, "busy", { ttl: 30_000 });
      assert.equal(await client.lockAll([tenant, global], "j1", { limits: [1, 0], rates, ttl: 30_000 }), null);
      assert.equal(await client.rate(global), null, "a refused grant spent nothing");
      await client.unlock(tenant, "busy");
      assert.ok(await client.lockAll([tenant, global], "j1", { limits: [1, 0], rates, ttl: 30_000 }));
      assert.equal((await client.rate(global)).remaining, 2, "the grant spent one of 3");
      await client.unlockAll([tenant, global], "j1");
    });

    test("a waiter is served once its last key frees, and opposite key orders do not deadlock", async () => {
      const [x, y] = [k("wait:x"), k("wait:y")];
      await client.lock(x, "hx", { ttl: 30_000 });
      await client.lock(y, "hy", { ttl: 30_000 });
      // The second is sent once the first waits: each opens a wait connection of its own, and
      // the server serves multi-key waiters in the order they arrive.
      const first = client.lockAll([x, y], "w1", { ttl: 30_000, wait: 30_000 });
      await waitFor(async () => (await client.waiters(x)) === 1 && (await client.waiters(y)) === 1, { message: "the first waiter" });
      const second = client.lockAll([y, x], "w2", { ttl: 30_000, wait: 30_000 });
      await waitFor(async () => (await client.waiters(x)) === 2 && (await client.waiters(y)) === 2, { message: "two waiters on each key" });
      await client.unlock(x, "hx");
      assert.deepEqual([await holders(x), await holders(y)], [[], ["hy"]], "a waiter holds nothing while it waits");
      await client.unlock(y, "hy");
      const got = await first;
      assert.equal(got.length, 2, "the first waiter is served");
      assert.deepEqual([await holders(x), await holders(y)], [["w1"], ["w1"]]);
      await client.unlockAll([x, y], "w1");
      assert.equal((await second).length, 2, "then the second, keys in the other order");
      assert.deepEqual([await holders(x), await holders(y)], [["w2"], ["w2"]]);
      await client.unlockAll([y, x], "w2");
      assert.equal(await client.lockAll([x], "w3", { wait: 50 }).then((t) => t.length), 1);
      await client.unlockAll([x], "w3");
    });

    test("MultiLock: acquire, a second waits and times out holding nothing, release frees every key", async () => {
      const keys = { [k("ml:tenant")]: 1, [k("ml:global")]: 2 };
      const one = new MultiLock(client, keys, { lockTimeout: 30_000, acquireTimeout: 100 });
      const two = new MultiLock(client, keys, { lockTimeout: 30_000, acquireTimeout: 100 });
      await one.acquire();
      assert.deepEqual(await holders(k("ml:global")), [one.identifier]);
      await assert.rejects(two.acquire(), (e) => e instanceof LockNotAcquiredError && e.holders.includes(one.identifier));
      assert.deepEqual(await holders(k("ml:global")), [one.identifier], "the refused MultiLock took no slot of the free key");
      await one.release();
      assert.equal(await two.tryAcquire(), true);
      assert.deepEqual(await holders(k("ml:tenant")), [two.identifier]);
      await two.release();
      assert.deepEqual([await holders(k("ml:tenant")), await holders(k("ml:global"))], [[], []]);
    });

    test("MultiLock renewal: a lease shorter than the work is kept on every key, with LOCKALL TTL only", async () => {
      const keys = [k("renew:a"), k("renew:b")];
      const lost = [];
      // Renewed every third of the lease: 1200 ms is kept through a stall of the loaded
      // machine of 800 ms, where one of 600 ms ended after 400 ms.
      const lease = 1200;
      const lock = new MultiLock(client, keys, { lockTimeout: lease, onLockLost: (e) => lost.push(e) });
      await lock.acquire();
      const start = Date.now();
      await waitFor(() => lock.renewals >= 4 && Date.now() - start > 2 * lease, { timeout: 30_000, message: "renewals" });
      const held = await Promise.all(keys.map((key) => client.holders(key)));
      assert.deepEqual(held.map(([h]) => h.token), lock.tokens, "the same holds, renewed");
      assert.ok(held.every(([h]) => h.ttl > 0), "every lease still runs");
      await lock.release();
      assert.deepEqual(lost, []);
    });

    test("MultiLock renewal: an UNLOCK of one key makes the next renewal refuse, and the loss is told once", async () => {
      const keys = [k("lost:a"), k("lost:b")];
      const lost = [];
      // A lease of 3 s: the UNLOCK comes while it is held however late the loaded machine
      // runs it; the loss is told at the next renewal, a second later.
      const lease = 3000;
      const lock = new MultiLock(client, keys, { lockTimeout: lease, onLockLost: (e) => lost.push(e) });
      await lock.acquire();
      assert.equal(await client.unlock(keys[0], lock.identifier), true);
      await waitFor(() => lost.length === 1, { message: "the loss to be told" });
      assert.deepEqual(lost[0].keys, keys);
      assert.match(lost[0].message, /another holder/);
      assert.equal(lock.isAcquired, false);
      // The renewal refused whole: the other key's hold is left to its lease, not renewed.
      const [h] = await client.holders(keys[1]);
      assert.ok(!h || h.ttl <= lease);
      await client.unlockAll(keys, lock.identifier);
      await lock.release();
      assert.equal(lost.length, 1);
    });

    test("MultiLock renewal: after a REAP of its owner the renewal's new holds are given up, then lost", async () => {
      const keys = [k("reaped:a"), k("reaped:b")];
      const owner = `w-dead-${name}`;
      const lost = [];
      // 3 s: still held when the REAP comes, however late the loaded machine runs it.
      const lock = new MultiLock(client, keys, { lockTimeout: 3000, owner, onLockLost: (e) => lost.push(e) });
      await lock.acquire();
      // At least its two holders: REAP also counts ended leases other tests left on this server.
      const reaped = await client.reap({ owner });
      assert.ok(reaped >= 2, `reaped ${reaped}`);
      await waitFor(() => lost.length === 1, { message: "the loss to be told" });
      assert.match(lost[0].message, /another fencing token/);
      await waitFor(async () => (await holders(keys[0])).length === 0 && (await holders(keys[1])).length === 0,
        { message: "the renewal's new holds given up" });
    });
  });
}
